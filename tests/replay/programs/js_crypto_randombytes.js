// node:crypto randomBytes: the sync form, the callback form and the promisified one.
const { randomBytes } = require('node:crypto');
const { promisify } = require('node:util');
console.log('sync', randomBytes(12).toString('hex'));
const viaCallback = await new Promise((ok, ko) => randomBytes(10, (e, b) => (e ? ko(e) : ok(b))));
console.log('callback', viaCallback.toString('base64'));
console.log('promisified', (await promisify(randomBytes)(8)).toString('hex'));
console.log('sync again', randomBytes(4).readUInt32BE(0));
