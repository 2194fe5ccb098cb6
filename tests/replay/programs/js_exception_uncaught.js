// An uncaught exception whose message carries a random value and the clock: status error,
// with a stack.
const token = Math.random().toString(16).slice(2, 10);
console.log('about to throw', token);
function inner(t) { throw new RangeError(`bad token ${t} at ${Date.now()}`); }
function outer() { inner(token); }
outer();
