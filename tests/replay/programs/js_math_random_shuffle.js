// Math.random through a Fisher-Yates shuffle and a weighted choice: the order is the output.
const deck = Array.from({ length: 20 }, (_, i) => i);
for (let i = deck.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [deck[i], deck[j]] = [deck[j], deck[i]];
}
console.log('shuffled', deck.join(' '));
const weights = { red: 5, green: 3, blue: 1 };
const picks = [];
for (let k = 0; k < 12; k++) {
    let r = Math.random() * 9;
    for (const [name, w] of Object.entries(weights)) {
        if ((r -= w) < 0) { picks.push(name); break; }
    }
}
console.log('picks', picks.join(','));
