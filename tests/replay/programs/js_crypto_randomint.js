// node:crypto randomInt: one bound, two bounds, negative ranges, the callback form.
const { randomInt } = require('node:crypto');
const dice = Array.from({ length: 12 }, () => randomInt(1, 7));
console.log('dice', dice.join(''));
console.log('below 1000', randomInt(1000), 'range', randomInt(-50, 50), 'wide', randomInt(2 ** 40));
const cb = await new Promise((ok, ko) => randomInt(10, 20, (e, n) => (e ? ko(e) : ok(n))));
console.log('callback', cb);
