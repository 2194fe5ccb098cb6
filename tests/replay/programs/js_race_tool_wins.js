// A tool result racing a timer, the tool far ahead: Promise.race of an immediate echo and a
// 5 s timeout (cleared once the tool won).
let handle;
const timer = new Promise((r) => { handle = setTimeout(() => r('timer'), 5000); });
const winner = await Promise.race([tools.corpus.echo({ who: 'tool' }).then((r) => r.who), timer]);
clearTimeout(handle);
console.log('winner', winner, 'at', new Date().toISOString());
