#!/usr/bin/env python3
"""End-to-end tests: each boots a real VM through `sandbox run` and checks what comes back.

Usage: run_test.py SANDBOX_BINARY TEST_NAME [PROFILE]

PROFILE (e.g. q35-serial) is passed to every `sandbox run` as --profile: the same tests run
over each channel attachment (docs/snapshot.md).

Every test runs the CLI in a private runtime directory (XDG_RUNTIME_DIR and TMPDIR point into a
fresh temp dir), tracks the PID of the CLI it started, and checks afterwards that nothing it
started is left: no process still holding the runtime dir, no file or socket in it.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402
import programs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(HERE, "tools.json")


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}")


processes_mentioning = procs.processes_mentioning


class Sandbox:
    """Runs `sandbox run` in a private runtime dir; cleans and checks for leaks."""

    def __init__(self, binary, profile=None):
        self.binary = binary
        self.profile = ["--profile", profile] if profile else []
        self.runtime = tempfile.mkdtemp(prefix="sbx-it-")

    def run(self, code, lang, *extra, timeout=240, sample_rss=False, env_extra=None):
        env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime, TMPDIR=self.runtime,
                   **(env_extra or {}))
        env.setdefault("SANDBOX_ACCEL", "tcg")
        # With code None, the last of @extra is the program file (and @lang may be None).
        argv = [self.binary, "run", *(["--lang", lang] if lang else []), "--json",
                *self.profile, *extra, *(["-"] if code is not None else [])]
        code = code if code is not None else ""
        start = time.monotonic()
        # A session of its own: no controlling terminal, so a call that needs an approval is
        # denied at once instead of asking on the developer's terminal.
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=TOP, start_new_session=True)
        peak_kib = 0
        try:
            if sample_rss:
                proc.stdin.write(code.encode())
                proc.stdin.close()
                out, err, peak_kib = self._wait_sampling(proc, timeout)
            else:
                out, err = proc.communicate(code.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise Failure(f"sandbox run did not finish in {timeout} s")
        elapsed = time.monotonic() - start
        try:
            result = json.loads(out)
        except ValueError:
            raise Failure("sandbox run --json printed no JSON",
                          f"rc={proc.returncode}\nstdout={out[:2000]!r}\nstderr={err[-4000:]!r}")
        result["_raw"] = out.decode()
        result["_rc"] = proc.returncode
        result["_stderr"] = err.decode(errors="replace")
        result["_elapsed"] = elapsed
        result["_peak_kib"] = peak_kib
        return result

    @staticmethod
    def _wait_sampling(proc, timeout):
        """Wait for @proc, reading its VmHWM (peak RSS) until it exits."""
        import threading
        chunks = {"out": b"", "err": b""}

        def drain(name, stream):
            chunks[name] = stream.read()

        threads = [threading.Thread(target=drain, args=("out", proc.stdout)),
                   threading.Thread(target=drain, args=("err", proc.stderr))]
        for t in threads:
            t.start()
        peak = 0
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.05)
        for t in threads:
            t.join()
        return chunks["out"], chunks["err"], peak

    def close(self):
        """Check that nothing is left behind, then remove the private runtime dir."""
        leftovers = []
        for root, dirs, files in os.walk(self.runtime):
            leftovers += [os.path.join(root, n) for n in dirs + files]
        pids = processes_mentioning(self.runtime)
        for pid in pids:  # only processes that carry our private dir: ours by construction
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.runtime, ignore_errors=True)
        check(not pids, f"processes left running: {pids}")
        check(not leftovers, f"files left in the runtime dir: {leftovers}")


def expect_ok(r):
    check(r["status"] == "ok" and r["_rc"] == 0, f"expected status ok, rc 0; got {r['status']}, "
          f"rc {r['_rc']}", json.dumps(r, indent=1)[:4000])


# ---- the tests -------------------------------------------------------------------------------

def test_js_hello(sbx):
    r = sbx.run('console.log("hello from js"); console.error("to stderr"); 6 * 7', "javascript")
    expect_ok(r)
    check(r["stdout"] == "hello from js\n", "stdout", repr(r["stdout"]))
    check(r["stderr"] == "to stderr\n", "stderr", repr(r["stderr"]))
    check(r["result"] == 42, "result of the last expression", repr(r["result"]))


# A worker thread's answer and a WebAssembly function's: what those flags must not take away.
JS_FLAGS_CODE = """const { Worker } = require('worker_threads');
const w = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
const fromWorker = await new Promise((ok, ko) => { w.on('message', ok); w.on('error', ko); });
await w.terminate();
const add = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 7, 1, 96, 2, 127, 127, 1, 127, 3, 2,
    1, 0, 7, 7, 1, 3, 97, 100, 100, 0, 0, 10, 9, 1, 7, 0, 32, 0, 32, 1, 106, 11]);
const { instance } = await WebAssembly.instantiate(add);
[process.execArgv, require('os').cpus().length, fromWorker, instance.exports.add(2, 3)]"""


def test_js_flags(sbx):
    """node's V8 flags in the guest (guest-image/agent/spawn.c): --single-threaded with one
    vCPU, --no-sparkplug under TCG (the profiles say tcg; SANDBOX_ACCEL may say otherwise);
    worker threads and WebAssembly still work with them."""
    r = sbx.run(JS_FLAGS_CODE, "javascript")
    expect_ok(r)
    argv, cpus, from_worker, wasm_sum = r["result"]
    tcg = os.environ.get("SANDBOX_ACCEL", "tcg") == "tcg"
    want = (["--single-threaded"] if cpus == 1 else []) + (["--no-sparkplug"] if tcg else [])
    check(argv == want, f"node's flags: {argv}, expected {want}")
    check(from_worker == 42 and wasm_sum == 5, f"worker {from_worker}, wasm {wasm_sum}")


def test_python_hello(sbx):
    r = sbx.run('import sys\nprint("hello from python")\nprint("err", file=sys.stderr)\n6 * 7',
                "python")
    expect_ok(r)
    check(r["stdout"] == "hello from python\n", "stdout", repr(r["stdout"]))
    check(r["stderr"] == "err\n", "stderr", repr(r["stderr"]))
    check(r["result"] == 42, "result of the last expression", repr(r["result"]))


def test_js_exception(sbx):
    r = sbx.run('console.log("before");\nthrow new TypeError("boom here")', "javascript")
    check(r["status"] == "error", "status error", json.dumps(r)[:2000])
    check(r["_rc"] != 0, "non-zero exit")
    err = r["error"]
    check(err["code"] == "runtime_error" and err["type"] == "TypeError", "error type", str(err))
    check("boom here" in err["message"], "error message", str(err))
    check(err.get("stack"), "a stack", str(err))
    check(r["stdout"] == "before\n", "output before the exception", repr(r["stdout"]))


def test_js_throw_only(sbx):
    """A program that is nothing but a throw (it once came back as status ok)."""
    r = sbx.run("throw new Error('boom')", "javascript")
    check(r["status"] == "error" and r["_rc"] == 1, "status error, exit 1", json.dumps(r)[:2000])
    check(r["error"]["message"] == "boom", "error message", str(r["error"]))


def test_python_exception(sbx):
    r = sbx.run('def f():\n    return 1 / 0\nf()', "python")
    check(r["status"] == "error", "status error", json.dumps(r)[:2000])
    err = r["error"]
    check(err["type"] == "ZeroDivisionError", "error type", str(err))
    check("f()" in (err.get("stack") or "") or "line" in (err.get("stack") or ""), "stack",
          str(err))


def test_syntax_error(sbx):
    r = sbx.run('let x = ;', "javascript")
    check(r["status"] == "error" and r["error"]["type"] == "SyntaxError", "SyntaxError",
          json.dumps(r)[:2000])


def test_exit_code(sbx):
    r = sbx.run('import sys\nprint("bye")\nsys.exit(3)', "python")
    check(r["exit_code"] == 3 and r["_rc"] == 3, "exit code 3 passed through",
          json.dumps(r)[:2000])


def test_timeout(sbx):
    r = sbx.run('console.log("spinning"); while (true) {}', "javascript", "--timeout", "3")
    check(r["status"] == "timeout", "status timeout", json.dumps(r)[:2000])
    check(r["_rc"] == 124, "exit 124 on timeout", str(r["_rc"]))
    check(r["error"]["code"] == "timeout", "error code timeout", str(r.get("error")))
    # Boot is part of the elapsed time; the timeout counts from execute.
    check(r["_elapsed"] < 90, f"timed out promptly (took {r['_elapsed']:.1f} s)")


def test_output_flood(sbx):
    """1 GiB to stdout: truncated at the cap, host agent memory stays bounded."""
    code = ('import sys\nchunk = b"x" * (1 << 20)\n'
            'for _ in range(1024):\n    sys.stdout.buffer.write(chunk)\n'
            'sys.stdout.flush()\nprint("unreachable marker", file=sys.stderr)\n"finished"')
    limit = 1 << 20
    r = sbx.run(code, "python", "--output-limit", str(limit), "--timeout", "600",
                timeout=900, sample_rss=True)
    check(r["output_truncated"] is True, "output_truncated", json.dumps(
        {k: v for k, v in r.items() if k not in ("stdout", "stderr")})[:2000])
    got = len(r["stdout"]) + len(r["stderr"])
    check(got <= limit, f"at most the cap came back ({got} > {limit})")
    check(r["stdout"].startswith("x" * 1000), "the first bytes arrived")
    check(r["status"] == "ok", "the program itself completed", r["status"])
    peak_mib = r["_peak_kib"] / 1024
    print(f"sandbox run peak RSS: {peak_mib:.1f} MiB")
    check(0 < peak_mib < 64, f"host agent peak RSS under 64 MiB (was {peak_mib:.1f} MiB)")


def test_tool_call_js(sbx):
    code = ('const r = await tools.calc.add({a: 2, b: 40});\n'
            'const many = await Promise.all([1, 2, 3].map(i => tools.calc.add({a: i, b: i})));\n'
            'console.log(r.result, many.map(m => m.result).join(","));\nr.result')
    r = sbx.run(code, "javascript", "--tools", TOOLS)
    expect_ok(r)
    check(r["stdout"] == "42 2,4,6\n", "tool results in the guest", repr(r["stdout"]))
    check(r["result"] == 42, "result", repr(r["result"]))
    check(len(r["tool_calls"]) == 4, "4 calls recorded", json.dumps(r["tool_calls"]))


def test_tool_call_python(sbx):
    code = ('r = tools.calc.add({"a": 1, "b": 2})\nprint(r["result"])\n'
            'try:\n    tools.calc.fail({})\nexcept Exception as e:\n'
            '    print(type(e).__name__, "tool_error" in repr(e) or "failed on purpose" in str(e))\n'
            'r["result"]')
    r = sbx.run(code, "python", "--tools", TOOLS)
    expect_ok(r)
    lines = r["stdout"].splitlines()
    check(lines[0] == "3", "tool result", repr(r["stdout"]))
    check(lines[1].endswith("True"), "tool error raised in the guest", repr(r["stdout"]))


def test_serial_port_private(sbx):
    """virtio-serial profiles: guest code cannot open the agent's port (it is root's, and the
    driver lets one process have it open: the agent's), so it cannot inject into the host's
    stream or read it; the execution itself goes on undisturbed."""
    code = ('import errno, os\n'
            'base = "/sys/class/virtio-ports"\n'
            'names = {open(f"{base}/{d}/name").read().strip(): d for d in os.listdir(base)}\n'
            'dev = "/dev/" + names["sbx.agent"]\n'
            'for mode in ("rb", "wb"):\n'
            '    try:\n'
            '        open(dev, mode, buffering=0).close()\n'
            '        print("opened")\n'
            '    except OSError as e:\n'
            '        print(errno.errorcode[e.errno])\n')
    r = sbx.run(code, "python")
    expect_ok(r)
    lines = r["stdout"].split()
    check(len(lines) == 2 and all(w in ("EACCES", "EBUSY", "EPERM") for w in lines),
          "the port cannot be opened by guest code", repr(r["stdout"]))


# ---- a current node, and TypeScript (docs/guest-image.md "Node"; runners/README.md) ----------

def image_node_version():
    """The node version the image was built with (manifest.json's `node.version`)."""
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    with open(os.path.join(image, "manifest.json")) as f:
        return json.load(f)["node"]["version"]


# What code written today assumes of node: APIs of node 20-24 and ES2023-2025, the global
# `crypto`, structuredClone, top-level await, ES modules (an import declaration, import() of a
# module of its own) and CommonJS (require of built-ins and of a file), and libuv's async file
# I/O, timers and a child process under the runner's seccomp filter (io_uring refused with
# ENOSYS: libuv must fall back to epoll and its thread pool, not die).
JS_MODERN_CODE = r"""import { readFile } from 'node:fs/promises';
const fs = require('node:fs');
const { createHash } = require('crypto');
const uuid = crypto.randomUUID();
const { promise, resolve } = Promise.withResolvers();
setTimeout(() => resolve('resolved'), 5);
const clone = structuredClone({ d: new Date(0), m: new Map([[1, 2]]) });
const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode('abc'));
fs.writeFileSync('/tmp/esm.mjs', 'export const x = 6 * 7; export default "esm";');
fs.writeFileSync('/tmp/cjs.js', 'module.exports = { y: 7 };');
const esm = await import('/tmp/esm.mjs');
const viaCallback = await new Promise((ok, ko) =>
    fs.readFile('/tmp/cjs.js', 'utf8', (e, d) => (e ? ko(e) : ok(d.length))));
({
    version: process.version,
    uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(uuid),
    sorted: [3, 1, 2].toSorted(),
    reversed: [1, 2, 3].toReversed(),
    last: [1, 2, 3].findLast((n) => n < 3),
    groups: { ...Object.groupBy([1, 2, 3, 4], (n) => (n % 2 ? 'odd' : 'even')) },
    resolved: await promise,
    union: [...new Set([1, 2]).union(new Set([2, 3]))],
    intersection: [...new Set([1, 2]).intersection(new Set([2, 3]))],
    iter: Iterator.from([1, 2, 3]).map((x) => x * 2).toArray(),
    clone: [clone.d instanceof Date, clone.m.get(1)],
    random: crypto.getRandomValues(new Uint8Array(8)).length,
    sha: Buffer.from(digest).toString('hex').slice(0, 8),
    nodeSha: createHash('sha256').update('abc').digest('hex').slice(0, 8),
    esm: [esm.x, esm.default],
    cjs: require('/tmp/cjs.js').y,
    text: await readFile('/tmp/cjs.js', 'utf8'),
    viaCallback,
    child: require('node:child_process').execFileSync('/bin/echo', ['child']).toString().trim(),
    regexV: /[\p{L}--[a-z]]/v.test('A'),
})"""


def test_js_modern(sbx):
    """The issue's list runs on the image's node (the version of its manifest, 24 or later)."""
    r = sbx.run(JS_MODERN_CODE, "javascript")
    expect_ok(r)
    got = r["result"]
    want_version = "v" + image_node_version()
    check(got["version"] == want_version and int(want_version[1:].split(".")[0]) >= 24,
          f"node {got['version']} in the guest, the image says {want_version}")
    want = {"uuid": True, "sorted": [1, 2, 3], "reversed": [3, 2, 1], "last": 2,
            "groups": {"odd": [1, 3], "even": [2, 4]}, "resolved": "resolved",
            "union": [1, 2, 3], "intersection": [2], "iter": [2, 4, 6], "clone": [True, 2],
            "random": 8, "sha": "ba7816bf", "nodeSha": "ba7816bf", "esm": [42, "esm"],
            "cjs": 7, "text": "module.exports = { y: 7 };", "viaCallback": 26,
            "child": "child", "regexV": True}
    for k, v in want.items():
        check(got.get(k) == v, f"{k}: {got.get(k)!r}, expected {v!r}", json.dumps(got))
    check(r["stderr"] == "", "nothing on stderr (no warning)", repr(r["stderr"]))


def ts_declarations(sbx):
    """`sandbox tools --types ts` of the integration catalog: what an agent is handed."""
    p = subprocess.run([sbx.binary, "tools", "--types", "ts", "--tools", TOOLS],
                       capture_output=True, timeout=60, cwd=TOP)
    check(p.returncode == 0 and b"declare const tools" in p.stdout,
          "sandbox tools --types ts", p.stderr.decode(errors="replace"))
    return p.stdout.decode()


# TypeScript as an agent writes it: the declarations it was handed pasted on top, then
# annotations, interfaces, type aliases, generics, `as`, `satisfies`, `!`, optional members,
# abstract classes and type-only imports, with top-level await and the tools.
TS_CODE = """import type { Stats } from 'node:fs';
import { basename } from 'node:path';
interface User { name: string; age?: number }
type Id = string | number;
function first<T>(xs: readonly T[]): T | undefined { return xs[0]; }
abstract class Shape { abstract area(): number; describe(): string { return `area ${this.area()}`; } }
class Square extends Shape {
    #side: number;
    constructor(side: number) { super(); this.#side = side; }
    area(): number { return this.#side ** 2; }
}
const users: User[] = [{ name: 'ada' }, { name: 'bob', age: 3 }];
const u = first<User>(users)!;
const id: Id = 42 as Id;
const cfg = { retries: 3 } satisfies { retries: number };
let stats: Stats | undefined;
const r = await tools.calc.add({ a: 2, b: 40 }) as { result: number };
const typed: { result: number } = await tools.calc.add({ a: 1, b: 1 }) as any;
console.log(u.name, id, cfg.retries, new Square(3).describe(), basename('/x/main.ts'));
({ sum: r.result, two: typed.result, stats: stats ?? null, sorted: users.map((x: User): string => x.name).toSorted() })
"""


def test_ts_run(sbx):
    """`--lang typescript`: code written against `sandbox tools --types ts` runs as written
    (types stripped, not checked), with no warning on stderr."""
    code = ts_declarations(sbx) + TS_CODE
    r = sbx.run(code, "typescript", "--tools", TOOLS)
    expect_ok(r)
    check(r["stdout"] == "ada 42 3 area 9 main.ts\n", "stdout", repr(r["stdout"]))
    check(r["stderr"] == "", "nothing on stderr (no ExperimentalWarning)", repr(r["stderr"]))
    check(r["result"] == {"sum": 42, "two": 2, "stats": None, "sorted": ["ada", "bob"]},
          "result", repr(r["result"]))
    check(len(r["tool_calls"]) == 2, "2 tool calls", json.dumps(r["tool_calls"]))


def test_ts_file(sbx):
    """A .mts file is TypeScript without --lang; a runtime error's stack names main.ts and the
    line of the TypeScript source (stripping keeps lines and columns)."""
    tmp = tempfile.mkdtemp(prefix="sbx-ts-")
    path = os.path.join(tmp, "prog.mts")
    try:
        with open(path, "w") as f:
            f.write("const n: number = 1;\ninterface X {\n  a: string;\n}\n"
                    "function boom(x: X): never {\n  throw new TypeError(`bad ${x.a}`);\n}\n"
                    "console.log(n as number);\nboom({ a: 'b' } satisfies X);\n")
        r = sbx.run(None, None, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check(r["status"] == "error" and r["stdout"] == "1\n", "ran, then threw",
          json.dumps(r)[:2000])
    err = r["error"]
    check(err["type"] == "TypeError" and err["message"] == "bad b", "the error", str(err))
    check("main.ts:6" in err.get("stack", "") and "main.ts:9" in err.get("stack", ""),
          "stack lines of the TypeScript source", err.get("stack", ""))


def ts_refused(sbx, code, construct, line, hint):
    r = sbx.run(code, "typescript")
    check(r["status"] == "error" and r["_rc"] == 1, f"{construct}: status error",
          json.dumps(r)[:2000])
    err = r["error"]
    check(err["type"] == "SyntaxError" and f"TypeScript {construct}" in err["message"] and
          "not supported" in err["message"] and hint in err["message"],
          f"{construct}: a SyntaxError naming it, with what to write instead", str(err))
    check(err.get("stack", "").startswith(f"main.ts:{line}\n"), f"{construct}: at its line",
          err.get("stack", ""))
    check(r["stdout"] == "" and r["stderr"] == "", f"{construct}: nothing ran",
          repr(r["stdout"] + r["stderr"]))


def test_ts_enum(sbx):
    ts_refused(sbx, "console.log('never');\nenum Color { Red, Green }\nColor.Red",
               "enum", 2, "as const")


def test_ts_namespace(sbx):
    ts_refused(sbx, "const a: number = 1;\n\nnamespace NS { export const x = 1; }\nNS.x",
               "namespace", 3, "plain declarations")


def test_ts_parameter_property(sbx):
    ts_refused(sbx, "class P {\n  constructor(private x: number) {}\n}\nnew P(1)",
               "parameter property", 2, "assigned in the constructor")


def test_ts_invalid(sbx):
    """Code that is not TypeScript at all: node's parser message, at its line."""
    r = sbx.run("const a: number = 1;\nlet b: = 2;\n", "typescript")
    check(r["status"] == "error" and r["error"]["type"] == "SyntaxError" and
          r["error"].get("stack", "").startswith("main.ts:2\n"), "a SyntaxError at line 2",
          json.dumps(r)[:2000])


# ---- Python's data stack (the default recipe: guest-image/recipes/default.recipe) ------------

PY_DATA_CODE = """import numpy as np
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt
a = np.arange(12, dtype=np.int64).reshape(3, 4)
df = pd.DataFrame({"city": ["a", "b", "a", "c"], "n": [1, 2, 3, 4]})
by = df.groupby("city")["n"].sum()
fig, ax = plt.subplots(figsize=(2, 2))
ax.plot(a[0], a[1])
fig.savefig("/tmp/plot.png")
with open("/tmp/plot.png", "rb") as f:
    png = f.read()
print(matplotlib.get_backend())
{"sum": int(a.sum()), "mean": float(a.mean()), "inv": np.linalg.inv(np.array([[2.0, 0], [0, 4.0]])).tolist(),
 "groups": {k: int(v) for k, v in by.items()}, "csv": df.head(2).to_csv(index=False),
 "png": png[:8].hex(), "png_bytes": len(png), "numpy": np.__version__, "pandas": pd.__version__}
"""


def test_py_data_stack(sbx):
    """numpy, pandas and matplotlib (Agg, drawing to a file) import and work, with nothing on
    stderr (no warning about a backend, a font cache or a config directory)."""
    # Importing pandas and matplotlib and drawing take ~5 s under TCG on a quiet machine, but
    # outlasted the default 30 s with the suite's two VM tests and other builds at once.
    r = sbx.run(PY_DATA_CODE, "python", "--timeout", "120")
    expect_ok(r)
    got = r["result"]
    check(got["sum"] == 66 and got["mean"] == 5.5, "numpy arithmetic", json.dumps(got))
    check(got["inv"] == [[0.5, 0.0], [0.0, 0.25]], "numpy.linalg", json.dumps(got))
    check(got["groups"] == {"a": 4, "b": 2, "c": 4}, "pandas groupby", json.dumps(got))
    check(got["csv"] == "city,n\na,1\nb,2\n", "pandas to_csv", json.dumps(got))
    check(got["png"] == "89504e470d0a1a0a" and got["png_bytes"] > 1000, "a PNG written",
          json.dumps(got))
    check(r["stdout"] == "agg\n", "the Agg backend", repr(r["stdout"]))
    check(r["stderr"] == "", "nothing on stderr", repr(r["stderr"]))


def test_numpy_random_differs(sbx):
    """numpy is imported before the snapshot (runner.py, preload): its global generator is
    reseeded at the execute, so two VMs restored from one snapshot draw different numbers, as
    Python's own `random` does."""
    code = "import numpy as np, random\n[np.random.rand(), np.random.randint(1 << 30), random.random()]"
    a, b = sbx.run(code, "python"), sbx.run(code, "python")
    expect_ok(a)
    expect_ok(b)
    check(a["result"][0] != b["result"][0] and a["result"][1] != b["result"][1],
          "numpy's global generator differs between two restored VMs",
          f"{a['result']} {b['result']}")
    check(a["result"][2] != b["result"][2], "so does random's", f"{a['result']} {b['result']}")


# ---- replay: the seed and the clock (docs/protocol.md, "Replay") ----------------------------

REPLAY_PROGRAMS = {
    "javascript": """const c = require('node:crypto');
const t0 = performance.now();
await new Promise((r) => setTimeout(r, 20));
const v = [Math.random(), c.randomUUID(), crypto.randomUUID(), c.randomBytes(8).toString('hex'),
    Date.now(), new Date().toISOString(), performance.now() - t0, String(process.hrtime.bigint())];
console.log(JSON.stringify(v));
v""",
    "python": """import datetime, os, random, secrets, time, uuid
import numpy as np
t0 = time.perf_counter()
time.sleep(0.02)
v = [random.random(), os.urandom(8).hex(), str(uuid.uuid4()), secrets.token_hex(4),
     float(np.random.rand()), int(np.random.default_rng().integers(1 << 40)),
     time.time(), datetime.datetime.now().isoformat(), time.perf_counter() - t0,
     time.monotonic_ns()]
print(v)
v""",
}


def records_show(sbx, env, rid):
    p = subprocess.run([sbx.binary, "records", "show", rid, "--json"], capture_output=True,
                       env=dict(os.environ, **env), timeout=60)
    check(p.returncode == 0, f"records show {rid}", p.stderr.decode(errors="replace"))
    return json.loads(p.stdout)


def replay_language(sbx, language):
    """A program's randomness (every kind, numpy's too) and clock reads, run through the
    execution core twice with the recorded seed and clock log: the same output and result. The
    record keeps the seed, the clock log and the verdict; a fresh run draws otherwise."""
    state = tempfile.mkdtemp(prefix="sbx-replay-state-")
    env = {"SANDBOX_STATE_DIR": state}
    try:
        code = REPLAY_PROGRAMS[language]
        first = sbx.run(code, language, env_extra=env)
        expect_ok(first)
        rec = records_show(sbx, env, first["id"])
        check(len(rec.get("seed") or "") == 64 and isinstance(rec.get("clock_log"), list) and
              len(rec["clock_log"]) >= 4 and rec.get("replayable") is True and
              rec.get("not_replayable") is None, "the record keeps the seed, the clock log and "
              "the verdict", json.dumps(rec)[:3000])
        log_path = os.path.join(state, "clock.json")
        with open(log_path, "w") as f:
            json.dump(rec["clock_log"], f)
        again = sbx.run(code, language, "--seed", rec["seed"], "--clock-log", log_path,
                        env_extra=env)
        expect_ok(again)
        check(again["stdout"] == first["stdout"] and again["result"] == first["result"],
              "the same seed and clock log: the same output and result",
              f"{first['stdout']}\n{again['stdout']}")
        rec2 = records_show(sbx, env, again["id"])
        check(rec2.get("seed") == rec["seed"] and rec2.get("clock_log") == rec["clock_log"] and
              rec2.get("replayable") is True, "the replay's record: the same seed and log",
              json.dumps(rec2)[:3000])
        fresh = sbx.run(code, language, env_extra=env)
        expect_ok(fresh)
        check(fresh["result"][0] != first["result"][0] and
              fresh["result"][1] != first["result"][1], "a fresh seed draws otherwise",
              f"{first['result']}\n{fresh['result']}")
        short = os.path.join(state, "short.json")
        with open(short, "w") as f:
            json.dump(rec["clock_log"][:1], f)
        diverged = sbx.run(code, language, "--seed", rec["seed"], "--clock-log", short,
                           env_extra=env)
        check(diverged["status"] == "error" and
              (diverged.get("error") or {}).get("code") == "replay_divergence",
              "a clock log too short is a divergence", json.dumps(diverged)[:3000])
    finally:
        shutil.rmtree(state, ignore_errors=True)


def write_json(state, name, value):
    path = os.path.join(state, name)
    with open(path, "w") as f:
        json.dump(value, f)
    return path


def replay_args(state, rec, log_open=False):
    """sandbox run's options that replay the record @rec."""
    args = ["--seed", rec["seed"], "--clock-log", write_json(state, "clock.json", rec["clock_log"])]
    if rec.get("event_log") is not None:
        args += ["--event-log", write_json(state, "events.json", rec["event_log"])]
    return args + (["--log-open"] if log_open else [])


TIMEOUT_PROGRAMS = {
    "javascript": """const t = Date.now();
console.log(String(t % 100000));
await new Promise(() => setInterval(() => {}, 1000));""",
    "python": """import asyncio, time
t = time.time_ns() // 1000
print(t % 100000, flush=True)
await asyncio.sleep(3600)""",
}


def replay_timeout(sbx, language):
    """A run killed by its timeout after it printed a clock-derived value keeps the clock read
    it made before (streamed before the output), its record says so (log_open, replayable), and
    the same run replayed with its seed, logs and --log-open prints the same and times out the
    same way."""
    state = tempfile.mkdtemp(prefix="sbx-replay-state-")
    env = {"SANDBOX_STATE_DIR": state}
    try:
        code = TIMEOUT_PROGRAMS[language]
        first = sbx.run(code, language, "--timeout", "8", env_extra=env)
        check(first["status"] == "timeout" and first["stdout"].strip().isdigit(),
              "the run prints, then times out", json.dumps(first)[:3000])
        rec = records_show(sbx, env, first["id"])
        check(len(rec.get("clock_log") or []) >= 1 and rec.get("log_open") is True and
              rec.get("replayable") is True, "the record keeps the streamed read, open",
              json.dumps(rec)[:3000])
        again = sbx.run(code, language, "--timeout", "8", *replay_args(state, rec, True),
                        env_extra=env)
        check(again["status"] == "timeout" and again["stdout"] == first["stdout"],
              "replayed: the same output, and the same timeout",
              f"{json.dumps(first)[:1500]}\n{json.dumps(again)[:1500]}")
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_replay_timeout_js(sbx):
    replay_timeout(sbx, "javascript")


def test_replay_timeout_python(sbx):
    replay_timeout(sbx, "python")


def replay_timer_race(sbx, language):
    """A timer racing a tool result: which came first is in the record's event_log, and a
    replay takes the recorded branch even when the other comes first in real time (the tool
    answers at once in the replay of a run where the timer won, and late in the other)."""
    state = tempfile.mkdtemp(prefix="sbx-replay-state-")
    try:
        code = programs.timer_race(language, "sleep", 2000)
        for slow, fast, branch in [("8000", "0", "timer"), ("0", "8000", "tool")]:
            env = {"SANDBOX_STATE_DIR": state, "CALC_SLEEP_MS": slow}
            first = sbx.run(code, language, "--tools", TOOLS, "--timeout", "60", env_extra=env)
            expect_ok(first)
            check(first["result"] == branch, f"the {branch} first", json.dumps(first)[:3000])
            rec = records_show(sbx, env, first["id"])
            check(isinstance(rec.get("event_log"), list) and rec.get("replayable") is True and
                  rec.get("log_open") is False, "the record keeps the event order",
                  json.dumps(rec)[:3000])
            env["CALC_SLEEP_MS"] = fast
            again = sbx.run(code, language, "--tools", TOOLS, "--timeout", "60",
                            *replay_args(state, rec), env_extra=env)
            expect_ok(again)
            check(again["result"] == branch and again["stdout"] == first["stdout"],
                  f"replayed: the {branch}'s branch though the other came first",
                  f"{json.dumps(first)[:1500]}\n{json.dumps(again)[:1500]}")
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_replay_timer_race_js(sbx):
    replay_timer_race(sbx, "javascript")


def test_replay_timer_race_python(sbx):
    replay_timer_race(sbx, "python")


def test_replay_js(sbx):
    replay_language(sbx, "javascript")


def test_replay_python(sbx):
    replay_language(sbx, "python")


# ---- exact JSON values (docs/protocol.md, "Numbers") -------------------------------------------

ECHO = os.path.join(HERE, "echo")
sys.path.insert(0, ECHO)
import exact_values  # noqa: E402
from json_raw import member_text  # noqa: E402


class EchoTools:
    """A catalog of the three provider kinds, each with an `echo` tool that answers with the
    exact text it was sent and logs that text: "cmd" (command, also `numbers`), "mcp" (MCP over
    stdio), "http" (POST to a local endpoint on 127.0.0.1, started here, its PID tracked)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-echo-")
        self.log = os.path.join(self.dir, "echo.log")
        self.http = subprocess.Popen([sys.executable, os.path.join(ECHO, "echo-http"), self.log],
                                     stdout=subprocess.PIPE)
        port = int(self.http.stdout.readline())
        catalog = {"providers": {
            "cmd": {"kind": "command", "command": [os.path.join(ECHO, "echo-command")],
                    "env": {"ECHO_LOG": self.log}, "tools": {"echo": {}, "numbers": {}}},
            "mcp": {"kind": "mcp", "command": [sys.executable, os.path.join(ECHO, "echo-mcp")],
                    "env": {"ECHO_LOG": self.log}},
            "http": {"kind": "http", "tools": {
                "echo": {"method": "POST", "url": f"http://127.0.0.1:{port}/echo"}}},
        }}
        self.catalog = os.path.join(self.dir, "tools.json")
        with open(self.catalog, "w") as f:
            json.dump(catalog, f)
        self.env = {"ECHO_LOG": self.log}

    def received(self):
        """The texts the tools were sent, one a call, in order."""
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().split("\n")[:-1]  # not splitlines(): U+2028 is no line end here

    def close(self):
        self.http.kill()
        self.http.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def js_to_json(values):
    """What the JS runner's own toJson prints for JSON.parse of each text (node on the host)."""
    script = ("import {toJson} from " + json.dumps(os.path.join(TOP, "guest-image", "runners",
                                                                "json.mjs")) + ";\n"
              "import {readFileSync} from 'fs';\n"
              "const texts = JSON.parse(readFileSync(0, 'utf8'));\n"
              "process.stdout.write(toJson(texts.map(t => JSON.parse(t)), 'result'));\n")
    p = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True,
                       input=json.dumps(values).encode(), timeout=60, check=True)
    return p.stdout.decode()


def run_with_echo(sbx, code, lang):
    """Run @code with the echo tools; the report and the texts the tools were sent."""
    echo = EchoTools()
    try:
        r = sbx.run(code, lang, "--tools", echo.catalog, env_extra=echo.env)
        return r, echo.received()
    finally:
        echo.close()


def round_trip(sbx, lang, provider):
    """Generated values guest -> echo tool -> guest, compared exactly in the guest (its own
    parser's value, kinds and -0 included) and on the host (the result, and for Python what the
    tool was sent)."""
    values = exact_values.texts()
    r, received = run_with_echo(sbx, exact_values.program(lang, provider, values), lang)
    expect_ok(r)
    check(r["stdout"] == f"checked {len(values)} bad []\n",
          f"{lang} -> {provider} -> {lang}: every value back unchanged", r["stdout"][:2000])
    check(len(received) == len(values), f"the tool got {len(values)} calls",
          f"{len(received)}")
    if lang == "python":
        for text, got in zip(values, received):
            check(exact_values.same(json.loads(got)["v"], json.loads(text)),
                  "the tool got the value the guest sent", f"{text} -> {got}")
        check(exact_values.same(r["result"], [json.loads(t) for t in values]),
              "the program's value, exactly", r["_raw"][:2000])
    else:
        want = js_to_json(values)
        got = member_text(r["_raw"], "result")
        check(got == want, "the program's value is the runner's own text, unchanged",
              f"want {want[:1500]}\ngot  {got[:1500]}")


def test_json_round_trip_python_command(sbx):
    round_trip(sbx, "python", "cmd")


def test_json_round_trip_python_mcp(sbx):
    round_trip(sbx, "python", "mcp")


def test_json_round_trip_python_http(sbx):
    round_trip(sbx, "python", "http")


def test_json_round_trip_js_command(sbx):
    round_trip(sbx, "javascript", "cmd")


def test_json_round_trip_js_mcp(sbx):
    round_trip(sbx, "javascript", "mcp")


def test_json_round_trip_js_http(sbx):
    round_trip(sbx, "javascript", "http")


def test_json_cases_python(sbx):
    """The cases of the issue, Python: 0.1 + 0.2 and 2**70 as the program's value; big and
    negative ints as a tool's input; a tool's numbers beyond a double as the guest sees them."""
    code = ('r = tools.cmd.numbers({})\n'
            'print(repr(r))\n'
            'x = tools.cmd.echo({"id": 1234567890123456789, "n": -9007199254740993})\n'
            '{"sum": 0.1 + 0.2, "big": 2**70, "x": x}')
    r, received = run_with_echo(sbx, code, "python")
    expect_ok(r)
    check(r["stdout"] == "{'a': 9007199254740993, 'b': 12345678901234567890, 'c': inf, "
          "'e': -0.0}\n", "Python gets the tool's numbers as its json makes them", r["stdout"])
    check(received == ['{"id":1234567890123456789,"n":-9007199254740993}'],
          "the tool gets the ints exactly", repr(received))
    check(member_text(r["_raw"], "result") ==
          '{"sum":0.30000000000000004,"big":1180591620717411303424,'
          '"x":{"id":1234567890123456789,"n":-9007199254740993}}',
          "the program's value, exactly", r["_raw"][:2000])
    calls = member_text(r["_raw"], "tool_calls")
    check('"result":{"a":9007199254740993,"b":12345678901234567890,"c":1e400,"e":-0.0}' in calls
          and '"input":{"id":1234567890123456789,"n":-9007199254740993}' in calls,
          "the record holds what crossed, exactly", calls[:2000])


def test_json_cases_js(sbx):
    """The cases of the issue, JavaScript: what JSON.parse makes of the tool's own text, BigInt
    inputs sent exactly, 0.1 + 0.2 as the program's value."""
    code = ("const r = await tools.cmd.numbers({});\n"
            "const t = JSON.parse('{\"a\": 9007199254740993, \"b\": 12345678901234567890, "
            "\"c\": 1e400, \"e\": -0.0}');\n"
            "console.log(Object.is(r.a, t.a), Object.is(r.b, t.b), r.c === Infinity, "
            "Object.is(r.e, -0), r.a === 9007199254740992);\n"
            "const x = await tools.cmd.echo({id: 1234567890123456789n, n: -9007199254740993n});\n"
            "({sum: 0.1 + 0.2, x})")
    r, received = run_with_echo(sbx, code, "javascript")
    expect_ok(r)
    check(r["stdout"] == "true true true true true\n",
          "JavaScript gets what its own JSON.parse makes of the tool's text", r["stdout"])
    check(received == ['{"id":1234567890123456789,"n":-9007199254740993}'],
          "BigInts reach the tool exactly", repr(received))
    check(member_text(r["_raw"], "result") ==
          '{"sum":0.30000000000000004,"x":{"id":1234567890123456800,"n":-9007199254740992}}',
          "the program's value, exactly", r["_raw"][:2000])


def test_files_in_out(sbx):
    """`sandbox run --put LOCAL[=REMOTE] --files-out DIR` (docs/cli.md): the files are in the
    workspace before the program runs, the ones it created or changed come back (written under
    DIR, and in the report without their contents); one past the 8 MiB of contents is reported,
    not written; an unchanged one does not come back."""
    tmp = tempfile.mkdtemp(prefix="sbx-files-", dir=sbx.runtime)
    blob = os.urandom(200 * 1024)
    with open(os.path.join(tmp, "blob.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(tmp, "in.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    out = os.path.join(tmp, "out")
    code = ("import hashlib, os\n"
            "rows = open('data/in.csv').read().splitlines()\n"
            "os.makedirs('res', exist_ok=True)\n"
            "open('res/count.txt', 'w').write(str(len(rows)))\n"
            "open('data/in.csv', 'a').write('3,4\\n')\n"
            "open('big.bin', 'wb').write(b'z' * (9 << 20))\n"
            "hashlib.sha256(open('blob.bin', 'rb').read()).hexdigest()\n")
    r = sbx.run(code, "python", "--put", os.path.join(tmp, "in.csv") + "=data/in.csv",
                "--put", os.path.join(tmp, "blob.bin"), "--files-out", out)
    expect_ok(r)
    check(r["result"] == hashlib.sha256(blob).hexdigest(), "the file put is in the workspace",
          r["result"])
    fo = r.get("files") or {}
    got = {f["path"]: f for f in fo.get("changed", [])}
    check(sorted(got) == ["big.bin", "data/in.csv", "res/count.txt"] and
          fo.get("truncated") is False and fo.get("error") is None,
          "the report lists the new and changed files", fo)
    check(all("content_base64" not in f for f in got.values()),
          "the report carries no contents (--files-out has them)", fo)
    try:
        with open(os.path.join(out, "res", "count.txt")) as f:
            count = f.read()
        with open(os.path.join(out, "data", "in.csv")) as f:
            csv = f.read()
    except OSError as e:
        raise Failure(f"--files-out wrote nothing: {e}", r["_stderr"])
    check(count == "2" and csv == "a,b\n1,2\n3,4\n", "--files-out has their contents",
          (count, csv))
    want_big = hashlib.sha256(b"z" * (9 << 20)).hexdigest()
    check(got.get("big.bin", {}).get("sha256") == want_big and
          not os.path.exists(os.path.join(out, "big.bin")) and
          "big.bin (9437184 bytes) not written" in r["_stderr"],
          "past 8 MiB of contents: its digest, not written, said on stderr",
          (got.get("big.bin"), r["_stderr"][-1000:]))
    check(not os.path.exists(os.path.join(out, "blob.bin")), "the unchanged file is not written")
    shutil.rmtree(tmp)
    p = subprocess.run([sbx.binary, "run", "--lang", "python", "--put", "../x=../x", "-"],
                       input=b"1", capture_output=True, timeout=60)
    check(p.returncode == 2 and b"not a workspace path" in p.stderr,
          "--put to a path out of the workspace: a usage error (2)", p)


TESTS = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[2] not in TESTS:
        print(f"usage: {sys.argv[0]} SANDBOX {{{'|'.join(TESTS)}}} [PROFILE]", file=sys.stderr)
        return 2
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    sbx = Sandbox(sys.argv[1], sys.argv[3] if len(sys.argv) == 4 else None)
    failure = None
    try:
        TESTS[sys.argv[2]](sbx)
    except Failure as e:
        failure = e
    finally:
        try:
            sbx.close()
        except Failure as e:
            failure = failure or e
    if failure:
        print(f"FAIL: {failure}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
