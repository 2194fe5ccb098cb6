// Large output: ~500 KiB of lines made of random bytes (hex) and a counter.
const { randomBytes } = require('node:crypto');
let total = 0;
for (let i = 0; i < 6400; i++) {
    const line = `${String(i).padStart(5, '0')} ${randomBytes(36).toString('hex')}`;
    console.log(line);
    total += line.length + 1;
}
console.error('bytes written', total);
total
