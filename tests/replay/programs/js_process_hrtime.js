// process.hrtime(): the [seconds, nanoseconds] pair and the difference form hrtime(prev).
const a = process.hrtime();
await new Promise((r) => setTimeout(r, 15));
const d = process.hrtime(a);
const b = process.hrtime();
console.log(JSON.stringify({ a, d, b }));
console.log('elapsed ns', d[0] * 1e9 + d[1]);
