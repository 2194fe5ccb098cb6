// Date.now: several reads around some work; the values and their differences are printed.
const reads = [Date.now()];
let x = 0;
for (let i = 0; i < 200000; i++) x += i % 7;
reads.push(Date.now());
await new Promise((r) => setTimeout(r, 30));
reads.push(Date.now());
console.log(reads.join(' '), 'diffs', reads[1] - reads[0], reads[2] - reads[1], x);
