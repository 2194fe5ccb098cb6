// Randomness and the clock together: a simulated job queue whose jitter comes from
// Math.random and whose timestamps come from Date.now and performance.now.
const start = performance.now();
const jobs = [];
for (let i = 0; i < 6; i++) {
    const jitter = Math.floor(Math.random() * 20);
    await new Promise((r) => setTimeout(r, jitter));
    jobs.push({ i, jitter, at: Date.now(), since: +(performance.now() - start).toFixed(3) });
}
console.table(jobs);
