"""JSON values for the exact-JSON tests (run_test.py, json_* tests): their texts, generated
from a fixed seed so a failure is reproducible, and a comparison that tells apart what `==`
does not (1 and 1.0, 0.0 and -0.0, key order)."""
import inspect
import json
import math
import random
import struct

# Texts that a double (and so a re-print through one) would change, and their neighbours.
CORNERS = [
    "0", "-0", "0.0", "-0.0", "1", "-1", "1.0", "9007199254740991", "9007199254740992",
    "9007199254740993", "-9007199254740993", "1234567890123456789", "12345678901234567890",
    "-123456789012345678901234567890", "1180591620717411303424", "0.1", "0.30000000000000004",
    "1e-7", "1.5e+300", "1e21", "1e22", "123.456", "1.7976931348623157e+308",
    "-1.7976931348623157e+308", "2.2250738585072014e-308", "2.225073858507201e-308", "5e-324",
    "4.9406564584124654e-324", "0.1000000000000000055511151231257827",
    '"\\u00e9\\u4e2d\\ud83d\\ude00"', '"\u00e9\u4e2d\U0001f600"', '"line\\nbreak\\t\\"q\\" \\\\ \\/"',
    '"\\u001f\\u007f\\u2028"', "true", "false", "null", "[]", "{}", '{"": 1, "1": 2, "a": 3}',
]


def _double(rng):
    while True:
        d = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(d):
            return d


def _string(rng):
    chars = []
    for _ in range(rng.randrange(8)):
        cp = rng.choice([rng.randrange(1, 0x80), rng.randrange(0x80, 0xD800),
                         rng.randrange(0xE000, 0x110000)])
        chars.append(chr(cp))
    return "".join(chars)


def _value(rng, depth):
    kind = rng.randrange(7 if depth < 4 else 5)
    if kind == 0:
        return _double(rng)
    if kind == 1:
        return rng.choice([-1, 1]) * rng.randrange(10 ** rng.randrange(1, 40))
    if kind == 2:
        return _string(rng)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.uniform(-1e6, 1e6)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {_string(rng): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def texts(seed=10, n=60):
    """CORNERS, then @n generated values (escaped or raw UTF-8), a deep one and wide ones."""
    rng = random.Random(seed)
    out = list(CORNERS)
    for _ in range(n):
        out.append(json.dumps(_value(rng, 0), ensure_ascii=rng.random() < 0.5))
    out.append("[" * 20 + "1.5" + "]" * 20)
    out.append(json.dumps([_double(rng) for _ in range(300)]))
    out.append(json.dumps({f"k{i}": rng.randrange(-10 ** 25, 10 ** 25) for i in range(100)}))
    return out


def same(a, b):
    """Equal values of the same kinds: 1 is not 1.0, -0.0 is not 0.0, keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


# Guest code: each text parsed by the guest's own JSON parser, sent as {"v": value} to the echo
# tool, the answer compared in the guest (kinds and -0 included); the answers are the result.
PYTHON = "import json, math\ntexts = json.loads(TEXTS)\n" + inspect.getsource(same) + """bad, out = [], []
for i, t in enumerate(texts):
    v = json.loads(t)
    r = tools.PROVIDER.echo({"v": v})["v"]
    if not same(v, r):
        bad.append(i)
    out.append(r)
print("checked", len(out), "bad", bad)
out
"""

JAVASCRIPT = """const texts = JSON.parse(TEXTS);
const same = (a, b) => {
    if (typeof a !== typeof b) return false;
    if (typeof a === 'number') return Object.is(a, b);
    if (a === null || typeof a !== 'object') return a === b;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k, i) => k === kb[i] && same(a[k], b[k]));
};
const bad = [], out = [];
for (const [i, t] of texts.entries()) {
    const v = JSON.parse(t);
    const r = (await tools.PROVIDER.echo({v})).v;
    if (!same(v, r)) bad.push(i);
    out.push(r);
}
console.log('checked', out.length, 'bad', JSON.stringify(bad));
out
"""


def program(lang, provider, values):
    code = PYTHON if lang == "python" else JAVASCRIPT
    return code.replace("TEXTS", json.dumps(json.dumps(values))).replace("PROVIDER", provider)
