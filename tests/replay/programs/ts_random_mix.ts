// TypeScript (types stripped): Math.random, randomUUID and getRandomValues in typed code.
interface Draw { kind: string; value: string | number }
const draws: Draw[] = [
    { kind: 'math', value: Math.random() },
    { kind: 'uuid', value: crypto.randomUUID() },
    { kind: 'bytes', value: Buffer.from(crypto.getRandomValues(new Uint8Array(8))).toString('hex') },
];
function label(d: Draw): string { return `${d.kind}=${d.value}`; }
console.log(draws.map(label).join('\n'));
draws.length
