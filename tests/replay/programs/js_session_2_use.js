// Session execution 2 of 3: uses the state of execution 1, draws again, calls a tool.
const elapsed = Date.now() - sessionStart;
const r = await tools.corpus.echo({ id: sessionId, next: sessionNext(2) });
console.log('from 1', sessionId === r.id, r.next, 'elapsed >= 0', elapsed >= 0, elapsed);
var sessionSecond = Math.random();
console.log('second draw', sessionSecond);
