// Runs inside the VM: prints, calls host tools (a command and an MCP server), returns a value.
console.log("hello from", process.version, "in the sandbox");
const sum = await tools.calc.add({ a: 2, b: 40 });
console.log("the host's calculator says 2 + 40 =", sum.result);
// The knowledge-graph MCP server (npm @modelcontextprotocol/server-memory) runs on the host.
await tools.memory.create_entities({
  entities: [{ name: "sandbox", entityType: "program", observations: ["ran hello.js"] }],
});
const found = await tools.memory.open_nodes({ names: ["sandbox"] });
const graph = JSON.parse(found[0].text);
console.log("the MCP memory server knows:", graph.entities.map((e) => e.name).join(", "));
({ answer: sum.result, entities: graph.entities.length })
