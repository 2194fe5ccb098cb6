// Eight calls at once, sleeping by a random permutation of 0..7 times 250 ms: the arrival
// order is the permutation's inverse; both are printed.
const perm = [0, 1, 2, 3, 4, 5, 6, 7];
for (let i = perm.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [perm[i], perm[j]] = [perm[j], perm[i]];
}
const order = [];
await Promise.all(perm.map((p, i) =>
    tools.corpus.sleep_echo({ id: i, ms: p * 250 }).then((r) => order.push(r.id))));
console.log('perm', perm.join(','));
console.log('arrived', order.join(','));
