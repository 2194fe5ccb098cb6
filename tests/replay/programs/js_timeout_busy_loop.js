// A timeout in a busy loop (corpus.json: --timeout 4): values printed first, then a loop that
// never ends and reads no clock (a clock read a turn would reach the log's bound), until the
// host stops it.
console.log('begin', Date.now(), crypto.randomUUID());
let n = 0;
while (n >= 0) n = (n + 1) % 1e9;
console.log('not reached', n);
