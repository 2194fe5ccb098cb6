// process.uptime(): the process's age in seconds, read around a timer (a clock read through a
// path of its own, not Date or performance).
const a = process.uptime();
await new Promise((r) => setTimeout(r, 40));
const b = process.uptime();
console.log('uptime', a, b, 'delta', (b - a).toFixed(6));
