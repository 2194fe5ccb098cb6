// Timers and tool results interleaved: timers at 0, 600, 1800 and 3600 ms, tool calls
// answering after 300 and 2600 ms. The log of events in the order they happened is the output.
const log = [];
const t0 = Date.now();
const ev = (name) => log.push(`${name} at +${Date.now() - t0} ms`);
const timers = [0, 600, 1800, 3600].map((ms) => new Promise((r) => setTimeout(() => { ev(`timer${ms}`); r(); }, ms)));
const calls = [300, 2600].map((ms) => tools.corpus.sleep_echo({ id: ms, ms }).then((r) => ev(`tool${r.id}`)));
await Promise.all([...timers, ...calls]);
console.log(log.join('\n'));
