// A timer racing a tool result, the timer far ahead: Promise.race of a 3 s tool call and a
// 100 ms timeout. The winner and the time it was seen are printed; the tool's answer is then
// awaited and printed too, after the timer's.
const t0 = performance.now();
const slow = tools.corpus.sleep_echo({ id: 'tool', ms: 3000 });
const timer = new Promise((r) => setTimeout(() => r({ id: 'timer' }), 100));
const first = await Promise.race([slow, timer]);
console.log('first', first.id, (performance.now() - t0) < 3000);
const late = await slow;
console.log('then', late.id, late.slept_ms, Date.now());
