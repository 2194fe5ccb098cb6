// A deadline with AbortSignal.timeout racing two tool calls: the fast one is used, the slow
// one loses to the signal; which is which is printed with the clock.
const deadline = AbortSignal.timeout(800);
const aborted = new Promise((r) => deadline.addEventListener('abort', () => r('deadline')));
for (const ms of [50, 4000]) {
    const res = await Promise.race([tools.corpus.sleep_echo({ id: ms, ms }).then((r) => `tool${r.id}`), aborted]);
    console.log(ms, '->', res, performance.now().toFixed(1));
}
