// Only JSON values cross the sandbox boundary. toJson() turns a value into JSON text or says
// exactly why it cannot, where JSON.stringify would silently drop or change it (functions,
// undefined, NaN, Map, -0) or fail vaguely (BigInt, cycles).
//
// Numbers cross as text, unchanged: the host forwards each number literal as it is. So a
// number is printed so that it reads back as the same value: a double in its shortest round
// trip form (what JSON.stringify gives), but -0 as `-0` (JSON.stringify says `0`), and a
// BigInt as its exact integer text. The other way, JSON.parse makes of a literal what
// JavaScript makes of it anywhere: 9007199254740993 is 9007199254740992, 1e400 is Infinity.

// SBX_JSON_DEPTH_MAX (32) minus the message object around the value, minus one spare level.
export const DEPTH_MAX = 30;

export class SerializationError extends Error {
    constructor(message) {
        super(message);
        this.name = 'SerializationError';
        this.code = 'serialization_error';
    }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function string(s, path) {
    // The protocol refuses \u0000 (C strings end there) and text that is not Unicode.
    if (s.includes('\0'))
        throw new SerializationError(`${path}: a string contains a NUL character (\\0)`);
    if (LONE_SURROGATE.test(s))
        throw new SerializationError(`${path}: a string is not valid Unicode (lone surrogate)`);
    return JSON.stringify(s);
}

function member(path, key) {
    return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function refuse(path, what, hint) {
    return new SerializationError(`${path} is ${what}: only JSON values (objects, arrays, ` +
        `strings, finite numbers, bigints, booleans, null) can cross the sandbox boundary${hint}`);
}

function special(v, path) {
    if (v instanceof Map || v instanceof Set)
        return refuse(path, `a ${v.constructor.name}`, '; convert it with Object.fromEntries() ' +
            'or Array.from()');
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer)
        return refuse(path, `a ${v.constructor.name}`, '; convert it with Array.from()');
    if (v instanceof Promise)
        return refuse(path, 'a Promise', '; did you forget an await?');
    return null;
}

// JSON text of @value; undefined for undefined (no value). @path names it in messages.
export function toJson(value, path) {
    const open = new Set();
    const walk = (v, where, depth) => {
        if (v !== null && typeof v === 'object' && typeof v.toJSON === 'function')
            v = v.toJSON();
        switch (typeof v) {
        case 'string':
            return string(v, where);
        case 'boolean':
            return v ? 'true' : 'false';
        case 'undefined':
            return undefined;
        case 'number':
            if (!Number.isFinite(v))
                throw refuse(where, String(v), '');
            return Object.is(v, -0) ? '-0' : JSON.stringify(v);
        case 'bigint':
            return v.toString();
        case 'object':
            break;
        default:
            throw refuse(where, `a ${typeof v}`, '');
        }
        if (v === null)
            return 'null';
        const bad = special(v, where);
        if (bad)
            throw bad;
        if (depth >= DEPTH_MAX)
            throw new SerializationError(`${where}: nested deeper than ${DEPTH_MAX} levels`);
        if (open.has(v))
            throw new SerializationError(`${where}: circular reference`);
        open.add(v);
        let text;
        if (Array.isArray(v)) {
            // As in JSON, an undefined element is null.
            text = `[${v.map((x, i) => walk(x, `${where}[${i}]`, depth + 1) ?? 'null').join()}]`;
        } else {
            const parts = [];
            for (const k of Object.keys(v)) {
                const t = walk(v[k], member(where, k), depth + 1);
                if (t !== undefined) // as in JSON, an undefined member is left out
                    parts.push(`${string(k, where)}:${t}`);
            }
            text = `{${parts.join()}}`;
        }
        open.delete(v);
        return text;
    };
    return walk(value, path, 0);
}
