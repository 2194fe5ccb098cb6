// Session execution 3 of 3: the state of both earlier executions, printed together.
console.log('all', sessionSeed, sessionSecond, sessionNext(3), new Date().toISOString());
sessionNext(3)
