// TypeScript for the JS runner: node's own type stripping (module.stripTypeScriptTypes, node
// 22.13 and later; amaro, i.e. swc compiled to WebAssembly). Types are erased, not checked:
// each annotation, interface, type alias, generic argument, `as`/`satisfies` and `declare` is
// replaced by blanks of the same length, so lines and columns stay where they were and stacks
// point into the user's code. Syntax that would need JavaScript generated (enum, namespace,
// parameter properties, `import x = require()`) is refused by node with
// ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX; the error we report names the construct and what to write
// instead.
import module from 'node:module';

// Node 18 and 20 (the hosts' runner tests) have no type stripping: TypeScript is unavailable.
const strip = typeof module.stripTypeScriptTypes === 'function' ? module.stripTypeScriptTypes
    : null;
let loaded = false;

// Load amaro (its first call: ~0.3 s natively, seconds under TCG, ~20 MB), once. Node warns
// that stripTypeScriptTypes is experimental at its first call (only then: it remembers); that
// warning is about our use of it, not the user's code, so it is swallowed here, and no
// execution ever prints it.
export function loadTypeScript() {
    if (loaded || !strip)
        return strip !== null;
    const emitWarning = process.emitWarning;
    process.emitWarning = () => {};
    try {
        strip('');
    } finally {
        process.emitWarning = emitWarning;
    }
    loaded = true;
    return true;
}

// What to write instead of each construct node cannot erase (keyed by its message).
const HINTS = [
    [/\benum\b/, 'an object `as const`, or a union of literal types'],
    [/\bnamespace\b/, 'plain declarations, or an object'],
    [/\bparameter propert/, 'a field declared in the class and assigned in the constructor'],
    [/\bimport equals\b/, '`import x from \'m\'` or `const x = require(\'m\')`'],
    [/\bexport assignment\b/, 'the value as the last expression of the code'],
];

// The error of a failed strip, as the user should see it: a SyntaxError at main.ts:LINE,
// showing the line (node's own excerpt), that names the construct.
function typeScriptError(e, filename) {
    if (e?.code !== 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX' && e?.code !== 'ERR_INVALID_TYPESCRIPT_SYNTAX')
        return e;
    let message = String(e.message);
    // "TypeScript enum is not supported in strip-only mode": say what that mode is and what to
    // write instead. node's other messages (`<T>x` casts, `module` blocks) say it already.
    const construct = /^(TypeScript .+ is not supported) in strip-only mode$/.exec(message);
    if (e.code === 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX' && construct) {
        const hint = HINTS.find(([re]) => re.test(message));
        message = `${construct[1]}: TypeScript runs here with its types stripped (node's type ` +
            'stripping), which cannot turn it into JavaScript' +
            (hint ? `; use ${hint[1]} instead` : '');
    }
    const out = new SyntaxError(message);
    // node's stack starts with ":LINE\n<the line>\n<carets>\n\n" (no file name: we pass none,
    // or the stripped code would end with a sourceURL comment).
    const stack = typeof e.stack === 'string' ? e.stack : '';
    const at = stack.indexOf('\nSyntaxError');
    out.stack = (at > 0 && stack.startsWith(':') ? `${filename}${stack.slice(0, at)}\n` : '') +
        `SyntaxError: ${message}`;
    return out;
}

// @code without its types (same length, same lines); throws a SyntaxError naming what cannot
// be stripped.
export function stripTypes(code, filename) {
    if (!loadTypeScript())
        throw new Error(`TypeScript needs node 22.13 or later (this runner has ${process.version})`);
    try {
        return strip(code, { mode: 'strip' });
    } catch (e) {
        throw typeScriptError(e, filename);
    }
}
