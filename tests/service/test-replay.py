#!/usr/bin/env python3
"""POST /v1/executions/{id}/replay with real VMs (docs/api.md, "Replay"). Usage:
test-replay.py SANDBOX_BINARY

Starts `sandbox serve --listen` on 127.0.0.1 with a store of its own, a catalogs dir holding
the calc catalog (tests/integration/calc-tool) and five tenants, and checks with
python3-requests, every body against openapi.json (api.conforms):
  one-shot     a JavaScript record of Math.random()/Date.now() and a Python one with a tool call
               replay 200 `identical` (no divergence, no differences, durations); ?live=true
               calls the catalog again: 200 with `differences` []; another tenant's record and a
               missing id are 404 not_found; ?live=maybe and an unknown parameter 400
               bad_request; GET and DELETE 405 with `Allow: POST`;
  not replayable  a Python program that starts a thread, one given files in its request, one
               still running: 409 not_replayable, the reason said;
  damaged      the record's stdout changed in sandbox.db (the server running; WAL): 200
               diverged, divergence.what "stdout" with both sides; a tool result changed: the
               replay answers from the record (divergence stdout, 43 against 42), ?live=true
               calls the tool again (divergence "tool result", every difference listed); a
               damaged seed: 409 cannot_replay;
  bounds       a tenant's second replay while its first runs: 429 rate_limited, Retry-After;
               a third tenant's while two run: 429; an execution of a tenant allowed 1 at once
               while its replay runs: 429; the replays' VMs (QEMUs below the server that its
               pools do not name) are gone once they answered;
  per minute   a tenant allowed 2 starts a minute runs one and replays it: its next replay
               and its next execution are 429;
  client gone  a replay whose client closes its connection: its VM is gone before the replay
               would have ended;
  session      `x = random.random()` then `print(x)` in a session: the second replayed after
               the first on one VM, `identical`; the first's stdout changed in the store: the
               second's replay diverges at "execution 1 of its session (ID)"; a file PUT into
               the session: the next execution's record is 409 not_replayable, saying why.
The server is stopped with SIGTERM while a replay runs: it exits 0 at once and the replay's
VM goes with it; none of its processes may be left. Exit 77
only when the guest image or the bridge is not built."""
import json
import os
import sqlite3
import sys
import threading
import time
import traceback

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api  # noqa: E402

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
CALC = os.path.join(api.TOP, "tests", "integration", "calc-tool")
DOC = api.load_openapi()
REPLAY_TIMEOUT = 240  # seconds for one replay's answer under TCG on a loaded host
SLEEPER = "import time\ntime.sleep(12)\nprint('slept')\n"  # a record whose replay lasts
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

def conforms_to_operation(r, method="post", path="/v1/executions/{id}/replay"):
    """The ways @r's body breaks the schema openapi.json gives its status on the operation."""
    op = DOC["paths"][path][method]
    resp = op["responses"].get(str(r.status_code))
    if resp is None and r.status_code == 405:  # said once for every path (info.description)
        resp = {"content": {"application/json": {"schema": {"$ref":
                                                            "#/components/schemas/Error"}}}}
    if resp is None:
        return [f"{method.upper()} {path}: no response {r.status_code} in the document"]
    while "$ref" in resp:
        node = DOC
        for k in resp["$ref"][2:].split("/"):
            node = node[k]
        resp = node
    schema = resp.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return []
    if not api.is_json(r):
        return [f"not application/json: {r.headers.get('Content-Type')}"]
    errs = api.conforms(DOC, r.json(), schema)
    for h in resp.get("headers", {}):
        if h not in r.headers:
            errs.append(f"no {h} header")
    return errs


def replay(srv, key, ex_id, query="", method="POST", timeout=REPLAY_TIMEOUT):
    return srv.request(method, f"/v1/executions/{ex_id}/replay{query}", key, timeout=timeout)


def verdict(r, want, what):
    """@r is 200 with a verdict @want, as the document says; its body (or {})."""
    body = r.json() if api.is_json(r) else {}
    ok = r.status_code == 200 and body.get("verdict") == want
    check(ok, f"{what}: 200 {want}", (r.status_code, r.text[:1500]))
    errs = conforms_to_operation(r)
    check(not errs, f"{what}: the answer is the document's", (errs, r.text[:500]))
    return body if ok else {}


def err_is(r, status, code, what, says=None):
    body = r.json() if api.is_json(r) else {}
    err = body.get("error", {}) if isinstance(body, dict) else {}
    ok = r.status_code == status and err.get("code") == code and \
        (says is None or says in err.get("message", ""))
    check(ok, f"{what}: {status} {code}" + (f" saying {says!r}" if says else ""),
          (r.status_code, r.text[:800]))
    errs = conforms_to_operation(r)
    check(not errs, f"{what}: the error is the document's", (errs, r.text[:500]))
    return err


def run(srv, key, body):
    r = srv.create(key, body, wait=120, timeout=180)
    ex = r.json() if r.status_code == 201 else {}
    if ex.get("status") in ("queued", "running"):
        ex = srv.wait_done(key, ex["id"])
    check(r.status_code == 201 and ex.get("status") == "ok", "the execution ran ok",
          (r.status_code, r.text[:800], ex))
    return ex


def store_update(db, sql, args):
    """One write to the server's store while it runs (WAL: its readers are not blocked)."""
    with sqlite3.connect(db, timeout=30) as c:
        n = c.execute(sql, args).rowcount
    c.close()
    return n


def replay_vms(srv, before):
    """The QEMUs below the server now that it did not have in @before and its status does not
    name: the replays' (a replay's VM is not the pool's)."""
    pooled = api.vm_pids(srv.status())
    out = set()
    for p in api.descendants(srv.proc.pid) - before - pooled:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if b"qemu-system" in f.read().split(b"\0")[0]:
                    out.add(p)
        except OSError:
            pass
    return out


class Background:
    """A request in a thread: its answer (or exception) once it ended."""

    def __init__(self, fn):
        self.answer, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.answer = fn()
        except Exception as e:  # noqa: BLE001 - read by the caller
            self.error = e

    def join(self, timeout=REPLAY_TIMEOUT + 30):
        self.thread.join(timeout)
        return self.answer


# ---- sections --------------------------------------------------------------------------------

JS = "const v = [Math.random(), Date.now()];\nconsole.log(JSON.stringify(v));\nv"
PY_TOOL = ("import random\nr = tools.calc.add(a=2, b=40)\n"
           "print('got', r['result'], random.random())\nr['result']")
IDS = {}


def one_shot(srv, ka, kb):
    js = run(srv, ka, {"language": "javascript", "code": JS})
    py = run(srv, ka, {"language": "python", "code": PY_TOOL, "catalog": "calc"})
    IDS.update(js=js.get("id"), py=py.get("id"))
    check(py.get("stdout", "").startswith("got 42 ") and len(py.get("tool_calls") or []) == 1,
          "python: the tool was called", py)
    for name in ("js", "py"):
        body = verdict(replay(srv, ka, IDS[name]), "identical", f"{name}: replay")
        check(body.get("id") == IDS[name] and "divergence" not in body and
              "differences" not in body and isinstance(body.get("duration_ms"), int) and
              body["duration_ms"] >= 0 and isinstance(body.get("recorded_duration_ms"), int),
              f"{name}: the verdict names the record, no divergence, its durations", body)
    body = verdict(replay(srv, ka, IDS["py"], "?live=true"), "identical", "py: ?live=true")
    check(body.get("differences") == [] and "divergence" not in body,
          "?live=true: the catalog called again, every difference listed (none)", body)
    body = verdict(replay(srv, ka, IDS["js"], "?live=false"), "identical", "js: ?live=false")
    check("differences" not in body, "?live=false: a replay from the record", body)
    listed = srv.request("GET", "/v1/executions?limit=100", ka).json().get("executions")
    check(len(listed) == 2, "a replay writes no record: the tenant's executions are its two",
          [e.get("id") for e in listed])
    err_is(replay(srv, kb, IDS["js"]), 404, "not_found", "another tenant's record")
    err_is(replay(srv, ka, "x0123456789abcdef"), 404, "not_found", "a missing record")
    err_is(replay(srv, ka, IDS["js"], "?live=maybe"), 400, "bad_request", "?live=maybe")
    err_is(replay(srv, ka, IDS["js"], "?wait=1"), 400, "bad_request", "an unknown parameter")
    for method in ("GET", "DELETE", "PUT"):
        r = replay(srv, ka, IDS["js"], method=method, timeout=30)
        err_is(r, 405, "method_not_allowed", f"{method} .../replay")
        check(r.headers.get("Allow") == "POST", f"{method} .../replay: Allow: POST", r.headers)
    r = srv.request("POST", f"/v1/executions/{IDS['js']}/replay", None)
    check(r.status_code == 401, "no key: 401", r.text[:300])


def not_replayable(srv, ka):
    ex = run(srv, ka, {"language": "python", "code":
                       "import threading\nt = threading.Thread(target=lambda: None)\n"
                       "t.start()\nt.join()\nprint('joined')"})
    err_is(replay(srv, ka, ex.get("id")), 409, "not_replayable", "a record that started a thread",
           says="a thread was started")
    ex = run(srv, ka, {"language": "python", "code": "print(open('in.txt').read())",
                       "files": [{"path": "in.txt", "content": "given\n"}]})
    err_is(replay(srv, ka, ex.get("id")), 409, "not_replayable",
           "a record whose request gave files", says="files were put into the workspace")


def damaged(srv, ka, db):
    n = store_update(db, "UPDATE executions SET stdout = ? WHERE id = ?",
                     (b"tampered\n", IDS["js"]))
    check(n == 1, "the JavaScript record's stdout changed in the store")
    body = verdict(replay(srv, ka, IDS["js"]), "diverged", "a changed stdout")
    d = body.get("divergence") or {}
    check(d.get("what") == "stdout" and "tampered" in (d.get("recorded") or "") and
          "tampered" not in (d.get("replayed") or "") and d.get("where", "").startswith("byte 0"),
          "the divergence: stdout at byte 0, the record's and the replay's", d)
    check("differences" not in body, "without ?live, no differences", body)
    n = store_update(db, "UPDATE tool_calls SET result_json = ? WHERE execution_id = ?",
                     ('{"result":43}', IDS["py"]))
    check(n == 1, "the Python record's tool result changed in the store")
    d = verdict(replay(srv, ka, IDS["py"]), "diverged", "a changed tool result").get(
        "divergence") or {}
    check(d.get("what") == "stdout" and "got 43" in (d.get("replayed") or "") and
          "got 42" in (d.get("recorded") or ""),
          "answered from the record: the program printed 43 (stdout diverges)", d)
    body = verdict(replay(srv, ka, IDS["py"], "?live=true"), "diverged", "live, a changed result")
    d = body.get("divergence") or {}
    check(d.get("what") == "tool result" and d.get("where") == "call 1 (calc.add)" and
          d.get("recorded") == '{"result":43}' and d.get("replayed") == '{"result":42}',
          "?live=true: the tool answered 42 again, the record says 43", d)
    check(body.get("differences") == [d], "?live=true: every difference (only that one)", body)
    n = store_update(db, "UPDATE executions SET seed_hex = ? WHERE id = ?", ("zz", IDS["js"]))
    check(n == 1, "the JavaScript record's seed damaged in the store")
    err_is(replay(srv, ka, IDS["js"]), 409, "cannot_replay", "a record whose seed is damaged",
           says="its seed is not 64 hex digits")


def bounds(srv, ka, kc, kd):
    """Two replays at once on the server, one a tenant; their VMs gone after."""
    sleepers = [run(srv, k, {"language": "python", "code": SLEEPER}).get("id")
                for k in (ka, kc)]
    before = api.descendants(srv.proc.pid)
    first = Background(lambda: replay(srv, ka, sleepers[0]))
    time.sleep(3)  # the first replay is running: its sleep lasts 12 s
    r = replay(srv, ka, sleepers[0], timeout=60)
    err_is(r, 429, "rate_limited", "a tenant's second replay at once", says="one at a time")
    check(r.headers.get("Retry-After", "").isdigit(), "429: Retry-After", r.headers)
    second = Background(lambda: replay(srv, kc, sleepers[1]))
    time.sleep(3)
    r = srv.create(kc, {"language": "javascript", "code": "1"})
    err_is(r, 429, "rate_limited", "carol's execution while her replay runs (1 at once)",
           says="at most 1 executions at once")
    vms = replay_vms(srv, before)
    check(len(vms) >= 2, "two replays running: their QEMUs, which the pools do not name", vms)
    r = replay(srv, kd, IDS["js"], timeout=60)
    err_is(r, 429, "rate_limited", "a third tenant's while two run", says="try again later")
    check(r.headers.get("Retry-After", "").isdigit(), "429: Retry-After", r.headers)
    for bg, what in ((first, "the first"), (second, "the second")):
        ans = bg.join()
        check(bg.error is None and ans is not None, f"{what} replay answered", bg.error)
        if ans is not None:
            verdict(ans, "identical", f"{what} replay, while others were refused")
    vms -= api.vm_pids(srv.status())  # a pool VM still starting then is not a replay's
    check(api.wait_until(lambda: not any(api.alive(p) for p in vms), 30),
          "the replays' VMs are gone once they answered", [p for p in vms if api.alive(p)])


def per_minute(srv, ke):
    """A replay is one of the tenant's starts of the minute, and is refused past them."""
    ex_id = run(srv, ke, {"language": "javascript", "code": JS}).get("id")
    verdict(replay(srv, ke, ex_id), "identical", "erin's replay, her second start of the minute")
    r = replay(srv, ke, ex_id, timeout=60)
    err_is(r, 429, "rate_limited", "erin's replay past 2 starts a minute",
           says="at most 2 executions a minute")
    check(r.headers.get("Retry-After", "").isdigit(), "429: Retry-After", r.headers)
    err_is(srv.create(ke, {"language": "javascript", "code": "1"}), 429, "rate_limited",
           "erin's execution after a run and a replay (2 a minute)",
           says="at most 2 executions a minute")


def client_gone(srv, ka):
    ex_id = run(srv, ka, {"language": "python", "code": SLEEPER}).get("id")
    before = api.descendants(srv.proc.pid)
    r = srv.create(ka, {"language": "python", "code": SLEEPER})
    running = r.json().get("id") if r.status_code == 201 else None
    err_is(replay(srv, ka, running), 409, "not_replayable", "an execution still running",
           says="not finished")
    srv.request("POST", f"/v1/executions/{running}/cancel", ka)
    srv.wait_done(ka, running)
    bg = Background(lambda: replay(srv, ka, ex_id, timeout=6))
    time.sleep(3)
    vms = replay_vms(srv, before)
    check(vms, "the replay's VM runs", vms)
    bg.join()
    check(isinstance(bg.error, requests.RequestException),
          "the client gave up after 6 s (the replay sleeps 12)", (bg.error, bg.answer))
    start = time.monotonic()
    gone = api.wait_until(lambda: not any(api.alive(p) for p in vms), 20)
    check(gone and time.monotonic() - start < 5,
          "a replay whose client went away: its VM is gone before the replay would end",
          (vms, time.monotonic() - start))
    r = replay(srv, ka, IDS["py"])
    check(r.status_code == 200, "the tenant may replay again (the gone one is forgotten)",
          r.text[:300])


def session(srv, ka, db):
    r = srv.request("POST", "/v1/sessions", ka, timeout=120)
    if not check(r.status_code == 201, "a session opens", r.text[:300]):
        return
    sid = r.json()["id"]

    def run_in(code):
        r = srv.request("POST", f"/v1/sessions/{sid}/executions?wait=120", ka, timeout=180,
                        json={"language": "python", "code": code})
        ex = r.json() if r.status_code == 201 else {}
        check(ex.get("status") == "ok" and ex.get("session") == sid, "ran in the session",
              r.text[:500])
        return ex
    first = run_in("import random\nx = random.random()")
    second = run_in("print(x)")
    body = verdict(replay(srv, ka, second.get("id")), "identical",
                   "a session's second execution, replayed after its first")
    check(body.get("id") == second.get("id"), "the verdict is the second's", body)
    n = store_update(db, "UPDATE executions SET stdout = ? WHERE id = ?",
                     (b"tampered\n", first.get("id")))
    check(n == 1, "the session's first record's stdout changed in the store")
    d = verdict(replay(srv, ka, second.get("id")), "diverged",
                "a session's chain with its first record changed").get("divergence") or {}
    check(d.get("what") == "stdout" and
          d.get("where", "").startswith(f"execution 1 of its session ({first.get('id')})"),
          "the divergence names the session's first execution", d)
    r = srv.request("PUT", f"/v1/sessions/{sid}/files/in.txt", ka, data=b"from outside\n")
    check(r.status_code == 201, "a file PUT into the session", r.text[:300])
    third = run_in("print(open('in.txt').read(), x)")
    err_is(replay(srv, ka, third.get("id")), 409, "not_replayable",
           "an execution after a file was put into its session",
           says="files of its session were put or deleted")
    srv.request("DELETE", f"/v1/sessions/{sid}", ka)


def catalogs(tmp):
    d = os.path.join(tmp, "catalogs")
    os.makedirs(d)
    with open(os.path.join(d, "calc.json"), "w") as f:
        json.dump({"providers": {"calc": {"kind": "command", "command": [CALC],
                                          "tools": {"add": {}}}}}, f)
    return d


def body(tmp, servers):
    db = os.path.join(tmp, "state", "sandbox.db")
    keys = {"a": api.tenant(SANDBOX, db, "add", "alice", "--catalog", "calc",
                            "--max-sessions", "2"),
            "b": api.tenant(SANDBOX, db, "add", "bob"),
            "c": api.tenant(SANDBOX, db, "add", "carol", "--max-concurrent", "1"),
            "d": api.tenant(SANDBOX, db, "add", "dave"),
            "e": api.tenant(SANDBOX, db, "add", "erin", "--per-minute", "2")}
    srv = api.Server(SANDBOX, tmp, db, pool=1, catalogs_dir=catalogs(tmp))
    servers.append(srv)
    why = srv.start()
    if not check(why is None, "sandbox serve --listen starts", why):
        return
    section(one_shot, srv, keys["a"], keys["b"])
    section(not_replayable, srv, keys["a"])
    section(damaged, srv, keys["a"], db)
    section(bounds, srv, keys["a"], keys["c"], keys["d"])
    section(per_minute, srv, keys["e"])
    section(client_gone, srv, keys["a"])
    section(session, srv, keys["a"], db)
    section(shutdown, srv, keys["a"])


def shutdown(srv, ka):
    """SIGTERM with a replay running: the server exits 0, the replay's VM with it."""
    ex_id = run(srv, ka, {"language": "python", "code": SLEEPER}).get("id")
    before = api.descendants(srv.proc.pid)
    bg = Background(lambda: replay(srv, ka, ex_id))
    time.sleep(3)
    vms = replay_vms(srv, before)
    check(vms, "the replay's VM runs", vms)
    srv.track()
    start = time.monotonic()
    rc = srv.stop()
    check(rc == 0 and time.monotonic() - start < 8, "SIGTERM with a replay running: exit 0, "
          "before the replay would end", (rc, time.monotonic() - start))
    check(api.wait_until(lambda: not any(api.alive(p) for p in vms), 10),
          "the replay's VM is gone with the server", [p for p in vms if api.alive(p)])
    bg.join(60)
    check(bg.answer is None or bg.answer.status_code != 200,
          "the replay's client got no verdict", bg.answer and bg.answer.text[:300])


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")) or \
            not os.path.exists(os.environ.get("SANDBOX_BRIDGE", BUILD + "/bridge/sandbox-bridge")):
        print("skipped: the guest image or the bridge is not built")
        return 77
    api.run_with_servers("sbx-replay-", body, check, failures)
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
