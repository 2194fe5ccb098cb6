// The clock read between tool calls: how long each call took, as the program saw it.
const t = [Date.now(), performance.now()];
await tools.corpus.sleep_echo({ id: 'a', ms: 300 });
const t2 = [Date.now(), performance.now()];
await tools.corpus.echo({ x: 1 });
const t3 = [Date.now(), performance.now()];
console.log('wall', t[0], t2[0], t3[0]);
console.log('took', (t2[1] - t[1]).toFixed(3), (t3[1] - t2[1]).toFixed(3), t2[1] - t[1] >= 300);
