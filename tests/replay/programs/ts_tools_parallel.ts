// TypeScript (types stripped): typed tool results from parallel calls answering out of order
// (sleep_echo sleeps by its input), and a failing call caught; the arrival order is printed.
interface Slept { id: string; slept_ms: number }
const arrived: string[] = [];
async function call(id: string, ms: number): Promise<Slept> {
    const r = (await tools.corpus.sleep_echo({ id, ms })) as Slept;
    arrived.push(r.id);
    return r;
}
const results: Slept[] = await Promise.all([call('a', 1800), call('b', 30), call('c', 900)]);
console.log('arrived', arrived.join(','), 'issued', results.map((r) => r.id).join(','));
try {
    await tools.corpus.fail({ why: 'typed' });
} catch (e: any) {
    console.log('caught', e.code);
}
