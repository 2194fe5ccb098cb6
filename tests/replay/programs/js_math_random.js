// Math.random: ten draws, printed in full; a replay with another seed prints others.
const v = [];
for (let i = 0; i < 10; i++) v.push(Math.random());
console.log(JSON.stringify(v));
v.reduce((a, b) => a + b, 0)
