// A timeout (corpus.json: --timeout 4): clock-derived and random values printed, then an
// await that never settles (an interval keeps the loop alive). Status timeout.
console.log('started at', new Date().toISOString(), performance.now().toFixed(3), Math.random());
setInterval(() => {}, 1000);
await new Promise(() => {});
