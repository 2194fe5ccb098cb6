// Session execution 1 of 3: state for the next ones, from randomness and the clock.
const sessionSeed = Math.random();
const sessionStart = Date.now();
const sessionId = crypto.randomUUID();
function sessionNext(k) { return Math.floor(sessionSeed * 1000) + k; }
console.log('defined', sessionSeed, sessionStart, sessionId);
