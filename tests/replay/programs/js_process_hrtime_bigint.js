// process.hrtime.bigint(): nanosecond bigints and their differences.
const r = [];
for (let i = 0; i < 5; i++) {
    r.push(process.hrtime.bigint());
    await new Promise((ok) => setImmediate(ok));
}
console.log(r.map(String).join(' '));
console.log(r.slice(1).map((v, i) => String(v - r[i])).join(' '));
String(r[4] - r[0])
