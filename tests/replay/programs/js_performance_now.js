// performance.now: reads around timers of different lengths, printed to the microsecond.
const t = [performance.now()];
for (const ms of [5, 25, 50]) {
    await new Promise((r) => setTimeout(r, ms));
    t.push(performance.now());
}
console.log(t.map((v) => v.toFixed(3)).join(' '));
console.log(t.slice(1).map((v, i) => (v - t[i]).toFixed(3)).join(' '));
