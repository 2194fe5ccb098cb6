// Turns a cell of JavaScript into the body of an async function, like a REPL or a notebook:
// top-level await works, the value of the last expression statement is returned, `import`
// declarations become dynamic imports, and with an entry the function of that name is
// returned instead. Line numbers are kept, so stacks point into the user's code.
// In a session (execute.keep) the cell's top-level declarations (var, let, const, function,
// class, import) become properties of globalThis instead, so that later cells see them and may
// declare the same names again.
import { createRequire } from 'node:module';

// The image's acorn (the npm registry's, pinned by guest-image/build-image), then Debian's
// node-acorn (the hosts' tests), then wherever node would find it.
const ACORN_PATHS = ['/usr/local/lib/node_modules/acorn', '/usr/share/nodejs/acorn',
    '/usr/lib/nodejs/acorn', 'acorn'];

function loadAcorn() {
    const require = createRequire(import.meta.url);
    for (const p of ACORN_PATHS) {
        try {
            return require(p);
        } catch {
            // try the next one
        }
    }
    throw new Error(`acorn not found (tried ${ACORN_PATHS.join(', ')})`);
}

const acorn = loadAcorn();

// Name of the wrapper's parameter that carries the runner's helpers (see runner.mjs).
export const HELPER = '__sbx';

// A SyntaxError shaped like node's own: the stack shows the line and a caret.
function syntaxError(err, code, filename) {
    const e = new SyntaxError(err.message);
    if (err.loc) {
        const line = code.split('\n')[err.loc.line - 1] ?? '';
        e.stack = `${filename}:${err.loc.line}\n${line}\n${' '.repeat(err.loc.column)}^\n\n` +
            `SyntaxError: ${err.message}`;
    }
    return e;
}

// Parse as a script; code with import declarations parses only as a module. Of two
// failures, the one further into the code is the more useful.
function parse(code, filename) {
    const opts = { ecmaVersion: 'latest', allowAwaitOutsideFunction: true, allowHashBang: true };
    try {
        return acorn.parse(code, { ...opts, sourceType: 'script' });
    } catch (scriptErr) {
        try {
            return acorn.parse(code, { ...opts, sourceType: 'module' });
        } catch (moduleErr) {
            const err = (moduleErr.pos ?? 0) > (scriptErr.pos ?? 0) ? moduleErr : scriptErr;
            throw syntaxError(err, code, filename);
        }
    }
}

// `import a, {b as c} from 'm'` -> `const {default: a, b: c} = await __sbx.import('m');`
// In a session: `({default: globalThis.a, b: globalThis.c} = await __sbx.import('m'));`
function importToAwait(node, code, keep) {
    const from = `await ${HELPER}.import(${code.slice(node.source.start, node.source.end)})`;
    const names = [];
    let namespace = null;
    for (const s of node.specifiers) {
        const local = keep ? `globalThis.${s.local.name}` : s.local.name;
        if (s.type === 'ImportNamespaceSpecifier')
            namespace = local;
        else if (s.type === 'ImportDefaultSpecifier')
            names.push(`default: ${local}`);
        else
            names.push(`${code.slice(s.imported.start, s.imported.end)}: ${local}`);
    }
    const list = names.join(', ');
    if (keep && namespace)
        return `${namespace} = ${from};` + (list ? ` ({${list}} = ${namespace});` : '');
    if (keep)
        return list ? `({${list}} = ${from});` : `${from};`;
    if (namespace)
        return `const ${namespace} = ${from}` + (list ? `, {${list}} = ${namespace};` : ';');
    return list ? `const {${list}} = ${from};` : `${from};`;
}

// The edits that make the binding pattern @node assign to globalThis: `a` -> `globalThis.a`,
// `{a, b = 1}` -> `{a: globalThis.a, b: globalThis.b = 1}`, `[a, ...r]` likewise.
function patternToGlobals(node, edits) {
    const global = (id) => edits.push([id.start, id.end, `globalThis.${id.name}`]);
    if (node.type === 'Identifier') {
        global(node);
    } else if (node.type === 'ObjectPattern') {
        for (const p of node.properties) {
            if (p.type === 'RestElement') {
                patternToGlobals(p.argument, edits);
            } else if (p.shorthand) {
                const id = p.value.type === 'AssignmentPattern' ? p.value.left : p.value;
                edits.push([id.start, id.end, `${id.name}: globalThis.${id.name}`]);
            } else {
                patternToGlobals(p.value, edits);
            }
        }
    } else if (node.type === 'ArrayPattern') {
        for (const e of node.elements)
            if (e)
                patternToGlobals(e, edits);
    } else if (node.type === 'RestElement') {
        patternToGlobals(node.argument, edits);
    } else if (node.type === 'AssignmentPattern') {
        patternToGlobals(node.left, edits);
    }
}

// A session's top-level declaration @node as assignments to globalThis (same lines). Function
// declarations stay (they are hoisted: code may call them above their line); @prologue gets
// their assignments, run where the cell starts.
function declarationToGlobals(node, code, edits, prologue) {
    if (node.type === 'FunctionDeclaration') {
        prologue.push(`globalThis.${node.id.name} = ${node.id.name};`);
    } else if (node.type === 'ClassDeclaration') {
        edits.push([node.start, node.start, `globalThis.${node.id.name} = `]);
        edits.push([node.end, node.end, ';']);
    } else if (node.type === 'VariableDeclaration') {
        // `let a = 1, {b} = o;` -> `(globalThis.a = 1), ({b: globalThis.b} = o);`
        edits.push([node.start, node.start + node.kind.length, '']);
        for (const d of node.declarations) {
            edits.push([d.start, d.start, '(']);
            patternToGlobals(d.id, edits);
            edits.push([d.end, d.end, d.init ? ')' : ' = undefined)']);
        }
        if (code[node.end - 1] !== ';')
            edits.push([node.end, node.end, ';']);
    }
}

// Every node of the tree (acorn nodes are plain objects with a `type`).
function* nodes(node) {
    yield node;
    for (const v of Object.values(node)) {
        if (Array.isArray(v)) {
            for (const c of v)
                if (c && typeof c.type === 'string')
                    yield* nodes(c);
        } else if (v && typeof v.type === 'string') {
            yield* nodes(v);
        }
    }
}

// Returns { body, prologue, returnsValue }: the rewritten code, what must run before it (on
// the line of the wrapper's opening: see runner.mjs), and whether it returns the last value.
// @keep: a session's cell (its declarations become globals).
export function rewrite(code, entry, filename, keep = false) {
    const ast = parse(code, filename);
    const edits = []; // [start, end, replacement]
    const prologue = [];
    for (const node of nodes(ast)) {
        if (node.type === 'ImportDeclaration') {
            // Same number of lines, so that later line numbers stay right.
            const lines = code.slice(node.start, node.end).split('\n').length - 1;
            edits.push([node.start, node.end,
                importToAwait(node, code, keep) + '\n'.repeat(lines)]);
        } else if (node.type === 'ImportExpression') {
            edits.push([node.start, node.start + 'import'.length, `${HELPER}.import`]);
        } else if (node.type.startsWith('Export')) {
            const message = 'export is not supported: the code is not a module (its result ' +
                'is the last expression, or the value of its entry function)';
            throw syntaxError({ message, loc: acorn.getLineInfo(code, node.start) }, code,
                filename);
        }
    }
    if (keep)
        for (const node of ast.body)
            declarationToGlobals(node, code, edits, prologue);
    const last = ast.body[ast.body.length - 1];
    let returnsValue = false;
    let tail = '';
    if (entry) {
        tail = `\n;return (typeof ${entry} === 'undefined' ? undefined : ${entry});`;
    } else if (last && last.type === 'ExpressionStatement') {
        // The statement's range includes parentheses around the expression (the expression's
        // does not) and the semicolon, if any (which stays outside).
        const end = code[last.end - 1] === ';' ? last.end - 1 : last.end;
        edits.push([last.start, last.start, 'return (']);
        edits.push([end, end, ')']);
        returnsValue = true;
    }
    let body = code;
    // From the end backwards; of two edits at one place the later one first, so that the text
    // reads in the order the edits were made (`let a = 1` -> `(globalThis.a = 1);`, not `1;)`).
    const order = edits.map((e, i) => [...e, i]);
    order.sort((a, b) => b[0] - a[0] || b[1] - a[1] || b[3] - a[3]);
    for (const [start, end, text] of order)
        body = body.slice(0, start) + text + body.slice(end);
    return { body: body + tail, prologue: prologue.join(' '), returnsValue };
}
