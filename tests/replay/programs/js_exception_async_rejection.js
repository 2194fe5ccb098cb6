// A rejection after a tool call, not caught: status error; the message names the tool's
// answer and a random id.
const r = await tools.corpus.echo({ n: 3 });
const id = crypto.randomUUID();
console.log('echo said', r.n, 'id', id);
async function check(n) {
    await new Promise((ok) => setTimeout(ok, 5));
    if (n < 5) throw new Error(`n=${n} is below 5 (${id})`);
}
await check(r.n);
