// Every clock read of JavaScript interleaved, in one order, so that a replay that answered
// them in another order prints other values.
const v = {
    now1: Date.now(), perf1: performance.now(), date1: new Date().toISOString(),
    hr1: process.hrtime(), big1: String(process.hrtime.bigint()), str1: Date(),
};
await new Promise((r) => setTimeout(r, 10));
Object.assign(v, { big2: String(process.hrtime.bigint()), perf2: performance.now(), now2: Date.now() });
console.log(JSON.stringify(v, null, 1));
