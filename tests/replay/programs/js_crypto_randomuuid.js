// randomUUID of globalThis.crypto and of node:crypto, interleaved.
const nc = require('node:crypto');
const ids = [crypto.randomUUID(), nc.randomUUID(), crypto.randomUUID(), nc.randomUUID({ disableEntropyCache: true })];
ids.forEach((id, i) => console.log(i, id));
ids
