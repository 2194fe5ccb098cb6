// Tool inputs made of random values: the digests printed depend on the seed, and a replay
// that drew otherwise would send other inputs.
const words = Array.from({ length: 4 }, () => Math.random().toString(36).slice(2, 8));
const id = crypto.randomUUID();
const d = await tools.corpus.digest({ text: words.join(' ') + id });
console.log(words.join(' '), id);
console.log(d.sha256, d.length);
const e = await tools.corpus.echo({ id, n: require('node:crypto').randomInt(1e6) });
console.log(JSON.stringify(e));
