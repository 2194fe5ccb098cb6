// A failing tool: the error is caught and printed (code, name, message), then a call that
// succeeds; and a failing call inside Promise.allSettled.
try {
    await tools.corpus.fail({ why: 'first' });
    console.log('not reached');
} catch (e) {
    console.log('caught', e.name, e.code, JSON.stringify(e.message));
}
const settled = await Promise.allSettled([tools.corpus.echo({ ok: true }), tools.corpus.fail({ why: 'second' }),
    tools.corpus.lookup({ key: 'nowhere' })]);
for (const s of settled) console.log(s.status, s.status === 'fulfilled' ? JSON.stringify(s.value) : s.reason.code);
