// Runs inside the VM: prints, calls a host tool, and returns a value.
console.log("hello from", process.version, "in the sandbox");
const sum = await tools.calc.add({ a: 2, b: 40 });
console.log("the host's calculator says 2 + 40 =", sum.result);
({ answer: sum.result })
