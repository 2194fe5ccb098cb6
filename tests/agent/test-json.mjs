// The JavaScript runner's serialiser (guest-image/runners/json.mjs) on the host's node: numbers
// cross as text that reads back as the same value (-0 included, BigInt exactly), and what is
// not JSON is still refused. Run by runner_test.py (js_json): node test-json.mjs RUNNERS_DIR.
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const { SerializationError, toJson } =
    await import(pathToFileURL(path.join(process.argv[2], 'json.mjs')).href);

// -0 keeps its sign (JSON.stringify says 0), alone and inside values.
assert.equal(toJson(-0, 'result'), '-0');
assert.equal(toJson(0, 'result'), '0');
assert.equal(toJson([-0, 0, { z: -0 }], 'result'), '[-0,0,{"z":-0}]');

// BigInt: its exact integer text, of any size and sign.
assert.equal(toJson({ a: 1234567890123456789n }, 'result'), '{"a":1234567890123456789}');
assert.equal(toJson(-(2n ** 200n), 'result'), `-${2n ** 200n}`);
assert.equal(toJson(0n, 'result'), '0');
assert.equal(toJson(10n ** 5000n, 'result'), `1${'0'.repeat(5000)}`);
assert.equal(toJson([9007199254740993n], 'result'), '[9007199254740993]');

// Doubles: the shortest text that reads back as the same double.
assert.equal(toJson(0.1 + 0.2, 'result'), '0.30000000000000004');
assert.equal(toJson(5e-324, 'result'), '5e-324');
assert.equal(toJson(-5e-324, 'result'), '-5e-324');
assert.equal(toJson(Number.MAX_VALUE, 'result'), '1.7976931348623157e+308');
assert.equal(toJson(1e21, 'result'), '1e+21');
assert.equal(toJson(2 ** 53 + 2, 'result'), '9007199254740994');

const roundTrips = (x) => Object.is(JSON.parse(toJson(x, 'result')), x);
const doubles = [-0, 0, 1, -1, 0.1, 0.1 + 0.2, 1 / 3, Math.PI, -Math.E, 5e-324, -5e-324,
    Number.MIN_VALUE, Number.MAX_VALUE, -Number.MAX_VALUE, Number.EPSILON, 2 ** 53, 2 ** 53 + 2,
    -(2 ** 63), 1e21, 1e-7, 123456789.12345678, 2.2250738585072014e-308,
    2.225073858507201e-308, 9007199254740991, 4.35, 0.000001, 1e300 * 10];
for (const x of doubles)
    assert.ok(roundTrips(x), `${x} reads back as itself`);
// Any bit pattern of a finite double.
const bits = new BigUint64Array(1);
const asDouble = new Float64Array(bits.buffer);
let seed = 0x9e3779b97f4a7c15n;
for (let i = 0; i < 20000; i++) {
    seed = (seed * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    bits[0] = seed;
    const x = asDouble[0];
    if (Number.isFinite(x))
        assert.ok(roundTrips(x), `${x} (bits ${seed.toString(16)}) reads back as itself`);
}
// Nested, as in a real value.
const nested = JSON.parse(toJson({ a: [-0, 5e-324, 0.1 + 0.2] }, 'result'));
assert.ok(Object.is(nested.a[0], -0) && nested.a[1] === 5e-324 && nested.a[2] === 0.1 + 0.2);

// NaN and the infinities are still refused, at their path, with the list of what can cross.
for (const [v, what] of [[NaN, 'NaN'], [Infinity, 'Infinity'], [-Infinity, '-Infinity']]) {
    assert.throws(() => toJson({ x: [1n, v] }, 'result'), (e) => {
        assert.ok(e instanceof SerializationError);
        assert.equal(e.code, 'serialization_error');
        assert.equal(e.message, `result.x[1] is ${what}: only JSON values (objects, arrays, ` +
            'strings, finite numbers, bigints, booleans, null) can cross the sandbox boundary');
        return true;
    });
}
assert.throws(() => toJson(Symbol('s'), 'input'), /^SerializationError: input is a symbol:/);

// Parsing is JSON.parse: what JavaScript itself makes of the text.
assert.ok(Object.is(JSON.parse('-0'), -0));
assert.equal(JSON.parse('9007199254740993'), 9007199254740992);
assert.equal(JSON.parse('1e400'), Infinity);

console.log('ok');
