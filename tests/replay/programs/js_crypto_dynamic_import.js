// node:crypto reached through import() instead of require: the same patched generators.
const c = await import('node:crypto');
const { randomBytes, randomUUID } = await import('crypto');
console.log(c.randomBytes(6).toString('hex'), randomBytes(6).toString('hex'));
console.log(c.randomUUID(), randomUUID(), c.randomInt(100));
console.log(c.default.randomBytes(3).toString('hex'));
