// node:crypto randomFillSync and randomFill, into a Buffer, a typed array and a slice.
const { randomFillSync, randomFill } = require('node:crypto');
const buf = Buffer.alloc(12);
randomFillSync(buf, 4, 6);
console.log('partial', buf.toString('hex'));
const arr = randomFillSync(new Uint32Array(3));
console.log('u32', [...arr].join(','));
const filled = await new Promise((ok, ko) =>
    randomFill(new Uint8Array(8), (e, b) => (e ? ko(e) : ok(b))));
console.log('async', Buffer.from(filled).toString('hex'));
