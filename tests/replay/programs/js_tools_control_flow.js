// A tool result used in control flow: follow the lookup table's chain until next is null,
// branching on each value.
let key = 'start';
let sum = 0;
const path = [];
while (key !== null) {
    const r = await tools.corpus.lookup({ key });
    path.push(r.key);
    if (r.value % 2 === 1 && r.value > 10) sum += r.value * 2;
    else sum += r.value;
    key = r.next;
}
console.log('path', path.join(' -> '), 'sum', sum);
if (sum > 50) console.log('big'); else console.log('small');
sum
