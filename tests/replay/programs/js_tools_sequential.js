// Tool calls one after another; each result is printed and feeds the next input.
const a = await tools.corpus.echo({ n: 1, words: ['alpha', 'beta'] });
console.log('echo', JSON.stringify(a));
const b = await tools.corpus.digest({ text: a.words.join('-') });
console.log('digest', b.sha256, b.length);
const c = await tools.corpus.lookup({ key: 'start' });
console.log('lookup', JSON.stringify(c));
const d = await tools.corpus.echo({ prev: b.sha256.slice(0, 8), value: c.value * 2 });
console.log('echo again', JSON.stringify(d));
d
