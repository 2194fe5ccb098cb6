// stdout and stderr interleaved, which stream depends on random draws.
for (let i = 0; i < 20; i++) {
    const r = Math.random();
    (r < 0.5 ? console.log : console.error)(i, r.toFixed(6));
}
