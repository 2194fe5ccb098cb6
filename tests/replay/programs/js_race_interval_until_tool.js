// setInterval ticking while a tool call runs: how many ticks happened before the tool's
// result is timing-dependent, so the recorded count is what a replay must give again.
let ticks = 0;
const iv = setInterval(() => { ticks++; }, 200);
const r = await tools.corpus.sleep_echo({ id: 'x', ms: 1500 });
clearInterval(iv);
console.log('ticks before the tool answered', ticks, 'tool', r.id, 'clock', Date.now());
