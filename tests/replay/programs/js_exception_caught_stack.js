// Exceptions caught and printed: message, name and the stack's frames (the lines of this
// file), with random values in the messages; the program ends ok.
const errs = [];
for (let i = 0; i < 3; i++) {
    try {
        if (Math.random() < 0.5) JSON.parse('{bad');
        else null.f();
    } catch (e) {
        errs.push(e.name);
        console.log(i, e.name, e.message.split('\n')[0]);
        console.log(e.stack.split('\n').slice(0, 2).join(' | '));
    }
}
errs.join(',')
