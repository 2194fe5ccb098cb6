#!/usr/bin/env python3
"""Sessions, files and function calls over the HTTP API with real VMs (docs/sessions.md).
Usage: test-sessions.py SANDBOX_BINARY

Starts `sandbox serve --listen` on 127.0.0.1 with a store of its own and two tenants, and
checks with python3-requests and curl: state across three executions in Python, in
JavaScript and in TypeScript (variables, imports, functions, classes; a `let` declared again); function calls
with positional and keyword arguments, an async JavaScript function, a function defined by an
earlier execution, and every error case (no such function, arguments that do not fit, kwargs
in JavaScript, a value that is not JSON, an exception with its stack); a 10 MiB binary file in
and out with its SHA-256 both ways; paths that escape the workspace (`..`, absolute, through a
symbolic link the code planted) refused; the per-file and the workspace caps; one execution
at a time (409); a program that ends its runtime ends the session (`crashed`) and its VM; a
session past its idle timeout is gone and its VM reaped; two tenants cannot see each other's
sessions or files; a one-shot execution takes files in (text and base64) and returns the
ones it created or changed (size, SHA-256, contents up to 8 MiB over all; the record keeps
them without contents), also in a session; kill -9 of the server with sessions open leaves no QEMU and, after a
restart, the sessions read `interrupted` from the records. Exit 77 only when the guest image
or the bridge is not built."""
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api  # noqa: E402

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
MIB = 1 << 20
failures = []
checks = [0]


def check(cond, what, detail=""):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[:2000], flush=True)
    return cond


def section(fn, *args):
    print(f"-- {fn.__name__}", flush=True)
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - reported as a failure, not swallowed
        check(False, f"{fn.__name__}: {type(e).__name__}: {e}", traceback.format_exc())


# ---- helpers ---------------------------------------------------------------------------------

def new_session(srv, key, **body):
    r = srv.request("POST", "/v1/sessions", key, json=body or None, timeout=120)
    if not check(r.status_code == 201, "a session opens (201)", (r.status_code, r.text[:500])):
        raise RuntimeError("no session")
    s = r.json()
    check(s["status"] == "ready" and s["id"].startswith("se_"), "it is ready", s)
    check(r.headers.get("Location") == f"/v1/sessions/{s['id']}", "Location names it", r.headers)
    return s["id"]


def session(srv, key, sid):
    return srv.request("GET", f"/v1/sessions/{sid}", key)


def run_in(srv, key, sid, body, status=201):
    r = srv.request("POST", f"/v1/sessions/{sid}/executions?wait=120", key, json=body,
                    timeout=150)
    check(r.status_code == status, f"POST .../executions answers {status}",
          (r.status_code, r.text[:800]))
    return r.json()


def result_of(ex, want, what):
    ok = ex.get("status") == "ok" and ex.get("result") == want
    return check(ok, what, ex)


def error_of(ex, code, type_=None, what=""):
    err = ex.get("error") or {}
    ok = ex.get("status") == "error" and err.get("code") == code and \
        (type_ is None or err.get("type") == type_)
    return check(ok, f"{what}: error {code} {type_ or ''}", ex)


def qemu_of(srv, sid_pids_before):
    """The QEMU PIDs of open sessions now (the server's status)."""
    st = srv.status()
    out = set(st.get("session_pids", []))
    for p in st.get("profiles", {}).values():
        out.update(p.get("session_pids", []))
    return out - sid_pids_before


# ---- sections --------------------------------------------------------------------------------

def state_python(srv, key):
    sid = new_session(srv, key)
    ex = run_in(srv, key, sid, {"language": "python", "code":
                                "import math\nx = 1\n"
                                "def area(r, *, scale=1):\n    return math.pi * r * r * scale\n"
                                "class Box:\n    def __init__(self, v): self.v = v\n"})
    check(ex.get("status") == "ok" and ex.get("session") == sid, "python: the first cell", ex)
    result_of(run_in(srv, key, sid, {"language": "python", "code": "x = x + 1\nx"}), 2,
              "python: a variable of the first cell")
    result_of(run_in(srv, key, sid, {"language": "python",
                                     "code": "[x, Box(x).v, round(area(1), 5), math.e > 2]"}),
              [2, 2, 3.14159, True], "python: the import, function and class of the first cell")
    # function calls in the session: positional and keyword arguments, defined earlier
    result_of(run_in(srv, key, sid, {"language": "python", "code": "", "entry": "area",
                                     "args": [2], "kwargs": {"scale": 0.5}}),
              2 * 3.141592653589793, "python: a function of an earlier cell, with kwargs")
    error_of(run_in(srv, key, sid, {"language": "python", "code": "", "entry": "nope"}),
             "validation_error", "EntryNotFound", "python: no such function")
    error_of(run_in(srv, key, sid, {"language": "python", "code": "", "entry": "area",
                                    "args": [1, 2, 3]}),
             "validation_error", "TypeError", "python: arguments that do not fit")
    ex = run_in(srv, key, sid, {"language": "python", "code": "def boom(): raise KeyError('k')",
                                "entry": "boom"})
    error_of(ex, "runtime_error", "KeyError", "python: an exception")
    check("main.py" in ((ex.get("error") or {}).get("stack") or ""), "its stack is the code's",
          ex)
    error_of(run_in(srv, key, sid, {"language": "python", "code": "def f(): return {1, 2}",
                                    "entry": "f"}),
             "serialization_error", None, "python: a value that is not JSON")
    ex = run_in(srv, key, sid, {"language": "python",
                                "code": "async def g(n):\n    return n * 2", "entry": "g",
                                "args": [21]})
    result_of(ex, 42, "python: an async function is awaited")
    # after all those errors the state is still there
    result_of(run_in(srv, key, sid, {"language": "python", "code": "x"}), 2,
              "python: errors in cells keep the state")
    s = session(srv, key, sid).json()
    check(s["status"] == "ready" and s["executions"] == 10, "the session counts its executions",
          s)
    r = srv.request("GET", f"/v1/executions?session={sid}&limit=100", key)
    listed = r.json().get("executions", []) if r.status_code == 200 else []
    check(len(listed) == 10 and all(e["session"] == sid for e in listed),
          "GET /v1/executions?session= lists its executions", r.text[:500])
    r = srv.request("DELETE", f"/v1/sessions/{sid}", key)
    check(r.status_code == 200 and r.json()["status"] == "ended" and
          r.json()["end_status"] == "deleted", "DELETE ends it", r.text)
    r = srv.request("POST", f"/v1/sessions/{sid}/executions", key,
                    json={"language": "python", "code": "1"})
    check(r.status_code == 409, "an ended session runs nothing (409)", r.text)


def state_js(srv, key):
    sid = new_session(srv, key)
    run_in(srv, key, sid, {"language": "javascript", "code":
                           "import { basename } from 'node:path';\nlet x = 1;\nconst k = 10;\n"
                           "function twice(a) { return a * 2; }\n"
                           "class Box { constructor(v) { this.v = v; } }"})
    result_of(run_in(srv, key, sid, {"language": "javascript", "code": "x = x + 1; x"}), 2,
              "js: a variable of the first cell")
    result_of(run_in(srv, key, sid, {"language": "javascript",
                                     "code": "[twice(x), new Box(k).v, basename('/a/b.txt')]"}),
              [4, 10, "b.txt"], "js: the import, function and class of the first cell")
    result_of(run_in(srv, key, sid, {"language": "javascript", "code": "let x = 5; x"}), 5,
              "js: a let declared again")
    result_of(run_in(srv, key, sid, {"language": "javascript", "code": "",
                                     "entry": "twice", "args": [21]}),
              42, "js: a function of an earlier cell")
    result_of(run_in(srv, key, sid, {"language": "javascript",
                                     "code": "async function later(a, b) {\n"
                                             "  await new Promise(r => setTimeout(r, 10));\n"
                                             "  return {sum: a + b};\n}",
                                     "entry": "later", "args": [1, 2]}),
              {"sum": 3}, "js: an async function is awaited")
    error_of(run_in(srv, key, sid, {"language": "javascript", "code": "", "entry": "nope"}),
             "validation_error", "EntryNotFound", "js: no such function")
    r = srv.request("POST", f"/v1/sessions/{sid}/executions?wait=60", key, timeout=90,
                    json={"language": "javascript", "code": "", "entry": "twice",
                          "kwargs": {"a": 1}})
    check(r.status_code == 400 or (r.status_code == 201 and
                                   (r.json().get("error") or {}).get("code") ==
                                   "validation_error"),
          "js: kwargs refused", r.text[:500])
    error_of(run_in(srv, key, sid, {"language": "javascript", "code": "function f() { return f; }",
                                    "entry": "f"}),
             "serialization_error", None, "js: a value that is not JSON")
    result_of(run_in(srv, key, sid, {"language": "javascript", "code": "x"}), 5,
              "js: the state after errors")
    # a program that ends its runtime ends the session, and its VM
    pids = qemu_of(srv, set())
    ex = run_in(srv, key, sid, {"language": "javascript", "code": "process.exit(3)"})
    check(ex.get("status") == "error", "js: process.exit ends the execution", ex)
    s = session(srv, key, sid).json()
    check(s["status"] == "ended" and s["end_status"] == "crashed" and
          "state is gone" in (s["end_reason"] or ""), "the session ended, crashed, with why", s)
    check(api.wait_until(lambda: not any(api.alive(p) for p in pids), 30),
          "its QEMU is gone", pids)


def state_ts(srv, key):
    """TypeScript in a session: its cells' declarations (types stripped) stay, as JavaScript's."""
    sid = new_session(srv, key)
    run_in(srv, key, sid, {"language": "typescript", "code":
                           "interface Point { x: number; y: number }\n"
                           "let origin: Point = { x: 1, y: 2 };\n"
                           "function norm1(p: Point): number { return Math.abs(p.x) + Math.abs(p.y); }"})
    result_of(run_in(srv, key, sid, {"language": "typescript",
                                     "code": "origin.x += 40; norm1(origin) as number"}),
              43, "ts: a variable and a function of the first cell")
    result_of(run_in(srv, key, sid, {"language": "typescript", "code": "",
                                     "entry": "norm1", "args": [{"x": -3, "y": 4}]}),
              7, "ts: a function of an earlier cell, called by name")
    result_of(run_in(srv, key, sid, {"language": "typescript",
                                     "code": "const o2: Point = origin; o2.y"}),
              2, "ts: the interface of the first cell is gone, its value is not")
    srv.request("DELETE", f"/v1/sessions/{sid}", key)


def one_shot_calls(srv, key):
    ex = srv.create(key, {"language": "python", "code": "def add(a, b=0, *, c=0): return a+b+c",
                          "entry": "add", "args": [9007199254740993, 1], "kwargs": {"c": 0}},
                    wait=120).json()
    result_of(ex, 9007199254740994, "one-shot: a Python function, exact integers")
    ex = srv.create(key, {"language": "javascript", "code": "function pair(a, b) { return [b, a]; }",
                          "entry": "pair", "args": ["x", {"y": [1.5]}]}, wait=120).json()
    result_of(ex, [{"y": [1.5]}, "x"], "one-shot: a JavaScript function")


ONE_SHOT_FILES = []  # the id of one_shot_files's execution: kill9 reads its record back


def changed_of(ex, what):
    """The `files` object's changed files by path (the object checked whole)."""
    fo = ex.get("files") or {}
    check(fo.get("truncated") is False and fo.get("error") is None, f"{what}: files complete", fo)
    return {f["path"]: f for f in fo.get("changed", [])}


def one_shot_files(srv, key):
    blob = os.urandom(300 * 1024)
    code = (
        "import hashlib, os\n"
        "blob = hashlib.sha256(open('blob.bin', 'rb').read()).hexdigest()\n"
        "rows = open('data/in.csv').read().splitlines()\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/report.txt', 'w').write(f'{len(rows)} rows\\n')\n"
        "open('data/in.csv', 'a').write('3,4\\n')\n"
        "big = os.urandom(9 << 20)\n"
        "open('big.bin', 'wb').write(big)\n"
        "[blob, hashlib.sha256(big).hexdigest(), os.getcwd()]\n")
    body = {"language": "python", "code": code, "files": [
        {"path": "data/in.csv", "content": "a,b\n1,2\n"},
        {"path": "blob.bin", "content_base64": base64.b64encode(blob).decode()}]}
    ex = srv.create(key, body, wait=120).json()
    ONE_SHOT_FILES.append(ex.get("id"))
    res = ex.get("result") or [None, None, None]
    check(ex.get("status") == "ok" and res[0] == hashlib.sha256(blob).hexdigest() and
          res[2] == "/workspace", "one-shot: the files given are in the workspace, whole", ex)
    got = changed_of(ex, "one-shot")
    check(sorted(got) == ["big.bin", "data/in.csv", "out/report.txt"],
          "one-shot: the new and changed files come back, not the unchanged one", sorted(got))
    csv = got.get("data/in.csv", {})
    want = b"a,b\n1,2\n3,4\n"
    check(csv.get("size") == len(want) and csv.get("sha256") == hashlib.sha256(want).hexdigest() and
          base64.b64decode(csv.get("content_base64", "")) == want,
          "one-shot: a changed file with its size, digest and contents", csv)
    rep = got.get("out/report.txt", {})
    check(base64.b64decode(rep.get("content_base64", "")) == b"2 rows\n",
          "one-shot: a file the program made", rep)
    big = got.get("big.bin", {})
    check(big.get("size") == 9 * MIB and big.get("sha256") == res[1] and
          "content_base64" not in big and "8 MiB" in (big.get("omitted") or ""),
          "one-shot: past the 8 MiB of contents, size and digest only", big)
    r = srv.request("GET", f"/v1/executions/{ex.get('id')}", key)
    check(r.status_code == 200 and r.json().get("files") == ex.get("files"),
          "one-shot: GET shows the same files", r.text[:300])
    # JavaScript, no files given: `files: []` still returns what the program wrote
    ex = srv.create(key, {"language": "javascript", "files": [], "code":
                          "require('fs').writeFileSync('hello.txt', 'hi from js')"},
                    wait=120).json()
    got = changed_of(ex, "one-shot js")
    check(list(got) == ["hello.txt"] and
          base64.b64decode(got["hello.txt"].get("content_base64", "")) == b"hi from js",
          "one-shot js: the file it wrote", ex.get("files"))
    ex = srv.create(key, {"language": "python", "code": "1"}, wait=120).json()
    check(ex.get("files") is None, "without files, the object's files are null", ex)
    for bad, what in [([{"path": "../x", "content": ""}], "a path out of the workspace"),
                      ([{"path": "a", "content_base64": "!!"}], "base64 that is not"),
                      ({"path": "a"}, "not an array")]:
        r = srv.create(key, {"language": "python", "code": "1", "files": bad})
        check(r.status_code == 400 and r.json()["error"]["code"] == "bad_request",
              f"one-shot files: {what} is 400", r.text[:300])
    # in a session: the files the execution changed, not the session's older ones
    sid = new_session(srv, key)
    run_in(srv, key, sid, {"language": "python", "code": "open('old.txt', 'w').write('o')"})
    ex = run_in(srv, key, sid, {"language": "python", "files": [{"path": "in.txt", "content": "i"}],
                                "code": "open('new.txt', 'w').write(open('in.txt').read() * 2)"})
    got = changed_of(ex, "session")
    check(sorted(got) == ["new.txt"] and
          base64.b64decode(got["new.txt"].get("content_base64", "")) == b"ii",
          "in a session: only what this execution changed", ex.get("files"))
    srv.request("DELETE", f"/v1/sessions/{sid}", key)


def files(srv, key, tmp):
    sid = new_session(srv, key)
    data = os.urandom(10 * MIB)
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(tmp, "in.bin")
    with open(path, "wb") as f:
        f.write(data)
    # in with curl
    p = subprocess.run(["curl", "-sS", "-X", "PUT", "-H", f"Authorization: Bearer {key}",
                        "--data-binary", "@" + path, "-w", "\n%{http_code}",
                        f"{srv.base}/v1/sessions/{sid}/files/data/in.bin"],
                       capture_output=True, timeout=180)
    out = p.stdout.decode(errors="replace").rsplit("\n", 1)
    check(p.returncode == 0 and out[-1] == "201", "curl PUT of 10 MiB: 201", p)
    body = __import__("json").loads(out[0]) if len(out) == 2 and out[-1] == "201" else {}
    check(body.get("size") == len(data) and body.get("sha256") == digest,
          "its size and SHA-256 are the bytes sent", body)
    # the code sees it in its working directory, and writes one
    ex = run_in(srv, key, sid, {"language": "python", "code":
                                "import hashlib, os\n"
                                "b = open('data/in.bin', 'rb').read()\n"
                                "open('out.bin', 'wb').write(b[::-1])\n"
                                "[len(b), hashlib.sha256(b).hexdigest(), os.getcwd()]"})
    result_of(ex, [len(data), digest, "/workspace"], "the code reads it in /workspace")
    # out with requests
    r = srv.request("GET", f"/v1/sessions/{sid}/files/out.bin", key, timeout=180)
    check(r.status_code == 200 and r.content == data[::-1] and
          r.headers.get("X-Sandbox-Sha256") == hashlib.sha256(data[::-1]).hexdigest() and
          r.headers.get("Content-Type") == "application/octet-stream",
          "GET gives the file the code wrote, with its SHA-256", (r.status_code, r.headers))
    r = srv.request("GET", f"/v1/sessions/{sid}/files", key)
    entries = {e["path"]: e for e in r.json().get("entries", [])} if r.status_code == 200 else {}
    check(entries.get("data", {}).get("type") == "dir" and
          entries.get("data/in.bin", {}).get("size") == len(data) and
          entries.get("out.bin", {}).get("type") == "file" and r.json().get("truncated") is False,
          "the listing", r.text[:1000])
    # escapes
    ex = run_in(srv, key, sid, {"language": "python",
                                "code": "import os\nos.symlink('/etc', 'etc')\n"
                                        "os.symlink('/etc/hostname', 'host')"})
    for what, url in [("a symlink to a directory outside", "files/etc/passwd"),
                      ("a symlink to a file outside", "files/host"),
                      ("an absolute path", "files//etc/passwd"),
                      ("a .. component", "files/data/%2e%2e/%2e%2e/etc/passwd"),
                      ("an encoded NUL", "files/a%00b")]:
        p = subprocess.run(["curl", "-sS", "--path-as-is", "-o", "/dev/null", "-w",
                            "%{http_code}", "-H", f"Authorization: Bearer {key}",
                            f"{srv.base}/v1/sessions/{sid}/{url}"], capture_output=True,
                           timeout=60)
        check(p.stdout.decode() in ("400", "404") and p.stdout.decode() != "200",
              f"{what}: refused", p)
    r = srv.request("PUT", f"/v1/sessions/{sid}/files/etc/evil", key, data=b"x")
    check(r.status_code == 400, "a PUT through a planted symlink is refused", r.text)
    r = srv.request("GET", f"/v1/sessions/{sid}/files/missing", key)
    check(r.status_code == 404, "a missing file is 404", r.text)
    r = srv.request("DELETE", f"/v1/sessions/{sid}/files/data", key)
    check(r.status_code == 204, "DELETE of a directory", r.text)
    r = srv.request("GET", f"/v1/sessions/{sid}/files/data/in.bin", key)
    check(r.status_code == 404, "its files are gone", r.text)
    r = srv.request("DELETE", f"/v1/sessions/{sid}/files/out.bin", key)
    check(r.status_code == 204, "DELETE of a file", r.text)
    # caps
    r = srv.request("PUT", f"/v1/sessions/{sid}/files/big", key, data=b"\0" * (32 * MIB + 1),
                    timeout=120)
    check(r.status_code == 413, "a file over 32 MiB is refused (413)", r.text[:300])
    for name in ("a", "b"):
        r = srv.request("PUT", f"/v1/sessions/{sid}/files/{name}", key,
                        data=b"\1" * (24 * MIB), timeout=180)
        check(r.status_code == 201, f"24 MiB more ({name})", r.text[:300])
    r = srv.request("PUT", f"/v1/sessions/{sid}/files/c", key, data=b"\2" * (24 * MIB),
                    timeout=180)
    check(r.status_code == 507 and r.json()["error"]["code"] == "workspace_full",
          "past 64 MiB in the workspace: 507", r.text[:300])
    r = srv.request("PUT", f"/v1/sessions/{sid}/files/a", key, data=b"\3" * (24 * MIB),
                    timeout=180)
    check(r.status_code == 201, "a file replaced does not count twice", r.text[:300])
    srv.request("DELETE", f"/v1/sessions/{sid}", key)


def busy(srv, key):
    sid = new_session(srv, key)
    first = srv.request("POST", f"/v1/sessions/{sid}/executions", key,
                        json={"language": "python", "code": "import time\ntime.sleep(3)\n1"})
    check(first.status_code == 201, "a long execution starts", first.text)
    r = srv.request("POST", f"/v1/sessions/{sid}/executions", key,
                    json={"language": "python", "code": "2"})
    check(r.status_code == 409, "a second while it runs: 409", r.text)
    r = srv.request("GET", f"/v1/sessions/{sid}/files", key)
    check(r.status_code == 409, "a file operation while it runs: 409", r.text)
    s = session(srv, key, sid).json()
    check(s["status"] == "busy" and s["current_execution"] == first.json()["id"],
          "the session says what runs", s)
    done = srv.wait_done(key, first.json()["id"])
    result_of(done, 1, "the first ends")
    result_of(run_in(srv, key, sid, {"language": "python", "code": "2"}), 2,
              "then the next one runs")
    srv.request("DELETE", f"/v1/sessions/{sid}", key)


def idle(srv, key):
    sid = new_session(srv, key, idle_timeout_s=3)
    pids = qemu_of(srv, set())
    check(len(pids) >= 1, "its VM is in the server's status", pids)
    time.sleep(5)
    s = session(srv, key, sid).json()
    check(s["status"] == "ended" and s["end_status"] == "expired", "idle past 3 s: expired", s)
    check(api.wait_until(lambda: not any(api.alive(p) for p in pids), 30),
          "its VM is reaped", pids)


def isolation(srv, ka, kb):
    sid = new_session(srv, ka)
    srv.request("PUT", f"/v1/sessions/{sid}/files/secret", ka, data=b"alice's")
    for method, url in [("GET", ""), ("DELETE", ""), ("GET", "/files"),
                        ("GET", "/files/secret"), ("PUT", "/files/x")]:
        r = srv.request(method, f"/v1/sessions/{sid}{url}", kb, data=b"")
        check(r.status_code == 404, f"bob: {method} {url or '/'} of alice's session is 404",
              r.text)
    r = srv.request("POST", f"/v1/sessions/{sid}/executions", kb,
                    json={"language": "python", "code": "1"})
    check(r.status_code == 404, "bob cannot run in it", r.text)
    ids = [s["id"] for s in srv.request("GET", "/v1/sessions", kb).json()["sessions"]]
    check(sid not in ids, "nor list it", ids)
    r = srv.request("GET", f"/v1/sessions/{sid}/files/secret", ka)
    check(r.content == b"alice's", "alice still reads her file", r.content)
    srv.request("DELETE", f"/v1/sessions/{sid}", ka)


def example(srv, key):
    """The Python session client README.md shows (docs/examples/session-client.py)."""
    script = os.path.join(api.TOP, "docs", "examples", "session-client.py")
    p = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, SANDBOX_API=srv.base, SANDBOX_KEY=key))
    check(p.returncode == 0 and "got out/total.txt 4950 digest ok" in p.stdout and
          "one-shot wrote ['upper.txt'] 'SHOUT'" in p.stdout,
          "README's Python session client: state, files, a call, one-shot files",
          (p.returncode, p.stdout[-1500:], p.stderr[-1500:]))


def kill9(srv, key, tmp, key_b):
    sids = [new_session(srv, key), new_session(srv, key)]
    run_in(srv, key, sids[0], {"language": "python", "code": "x = 1"})
    pids = srv.kill9()
    check(api.wait_until(lambda: not any(api.alive(p) for p in pids), 30),
          "kill -9 of the server leaves no QEMU", [p for p in pids if api.alive(p)])
    why = srv.start()
    if not check(why is None, "the server starts again on the same store", why):
        return
    for sid in sids:
        r = session(srv, key, sid)
        check(r.status_code == 200 and r.json()["status"] == "ended" and
              r.json()["end_status"] == "interrupted",
              "a session open at the kill reads interrupted", r.text)
    r = srv.request("GET", f"/v1/executions?session={sids[0]}", key)
    listed = r.json().get("executions", []) if r.status_code == 200 else []
    check(len(listed) == 1 and listed[0]["session"] == sids[0] and
          listed[0]["status"] == "ok",
          "its execution, read back from the records, names its session", r.text[:500])
    for ex_id in ONE_SHOT_FILES:
        r = srv.request("GET", f"/v1/executions/{ex_id}", key_b)
        fo = r.json().get("files") if r.status_code == 200 else None
        names = sorted(f["path"] for f in (fo or {}).get("changed", []))
        check(names == ["big.bin", "data/in.csv", "out/report.txt"] and
              all("content_base64" not in f and len(f.get("sha256") or "") == 64
                  for f in fo["changed"][:2]),
              "the record keeps the files' names, sizes and digests, not their contents",
              r.text[:800])


def body(tmp, servers):
    db = os.path.join(tmp, "state", "sandbox.db")
    keys = {"a": api.tenant(SANDBOX, db, "add", "alice", "--max-sessions", "4"),
            "b": api.tenant(SANDBOX, db, "add", "bob")}
    srv = api.Server(SANDBOX, tmp, db, pool=2)
    servers.append(srv)
    why = srv.start()
    if not check(why is None, "sandbox serve --listen starts", why):
        return
    section(state_python, srv, keys["a"])
    section(state_js, srv, keys["a"])
    section(state_ts, srv, keys["b"])
    section(one_shot_calls, srv, keys["b"])
    section(files, srv, keys["a"], tmp)
    section(one_shot_files, srv, keys["b"])
    section(example, srv, keys["b"])
    section(busy, srv, keys["a"])
    section(idle, srv, keys["a"])
    section(isolation, srv, keys["a"], keys["b"])
    section(kill9, srv, keys["a"], tmp, keys["b"])


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")) or \
            not os.path.exists(os.environ.get("SANDBOX_BRIDGE", BUILD + "/bridge/sandbox-bridge")):
        print("skipped: the guest image or the bridge is not built")
        return 77
    check(shutil.which("curl") is not None, "curl is installed (scripts/setup)")
    api.run_with_servers("sbx-sessions-", body, check, failures)
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
