// Parallel tool calls whose results arrive out of order: sleep_echo answers after input.ms,
// so the last call issued answers first. The arrival order (and the clock at each arrival)
// is the output; Promise.all's result keeps the issue order.
const arrivals = [];
const t0 = performance.now();
const call = (id, ms) => tools.corpus.sleep_echo({ id, ms }).then((r) => {
    arrivals.push(r.id);
    console.log('arrived', r.id, 'after >=', r.slept_ms, 'ms', (performance.now() - t0) >= r.slept_ms);
    return r;
});
const all = await Promise.all([call('slow', 2400), call('medium', 1200), call('fast', 50)]);
console.log('arrival order', arrivals.join(' > '));
console.log('issue order', all.map((r) => r.id).join(' > '));
