#!/usr/bin/env python3
"""Execution records from real VMs (docs/service.md, "Records"). Usage: test-records-vm.py SANDBOX

`sandbox run` (its own VM, SANDBOX_STATE_DIR in a temp dir) leaves a record that `sandbox records
list/show --json` show: code, stdout, status, a tool call under its real names, the entropy the
guest got (64 bytes, hex). Then `sandbox serve --db` in a temp dir: one run to its end, one that
loops; kill -9 of serve; its QEMU dies with it (PR_SET_PDEATHSIG, checked by the PID from serve's
status); serve started again on the same database marks the looping one `interrupted` and the
finished one is intact. Then `sandbox serve --keep-mib 1`: runs of 400 KiB of output each; the
server prunes the oldest as soon as a tenth of the bound was written (not at the hour), keeping
the newest that fit in 1 MiB. Every process is tracked by PID. Exit 77 without the guest image."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

status = procs.serve_status
alive = procs.alive
SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "integration", "tools.json")
failures = []


def check(cond, what, got=None):
    if not cond:
        failures.append(what)
        print("FAIL:", what, "" if got is None else repr(got)[:2000], flush=True)


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except (OSError, RuntimeError, KeyError):
            pass
        time.sleep(0.1)
    check(False, f"timed out waiting for {what}")
    return False


def sandbox(env, *args, code=None, timeout=180):
    p = subprocess.run([SANDBOX, *args], input=code.encode() if code is not None else None,
                       capture_output=True, env=env, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def show(env, rid, *db):
    rc, out, err = sandbox(env, "records", "show", rid, "--json", *db)
    check(rc == 0, f"records show {rid}: rc {rc} err {err!r}")
    return json.loads(out) if rc == 0 else {}


def local_run(env):
    code = "console.log('hi');\nconst r = await tools.calc.add({a: 2, b: 40});\nr.result"
    rc, out, err = sandbox(env, "run", "--no-serve", "--lang", "javascript", "--tools", TOOLS,
                           "--json", "-", code=code)
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("result") == 42, f"sandbox run: rc {rc} out {out!r} err {err!r}")
    rid = rep.get("id", "")
    check(rid.startswith("x") and len(rid) == 17, "the report names the record", rep)
    rc, out, err = sandbox(env, "records", "list", "--json")
    rows = json.loads(out) if rc == 0 else []
    check([r["id"] for r in rows] == [rid], "records list has the run", rows)
    rec = show(env, rid)
    check(rec.get("code") == code and rec.get("stdout") == "hi\n" and rec.get("status") == "ok"
          and rec.get("front_end") == "run" and rec.get("tenant_id") is None, "the record", rec)
    check(len(rec.get("entropy") or "") == 128 and (rec.get("guest_clock_ms") or 0) > 0,
          "the entropy and clock the guest got", rec)
    check(rec.get("snapshot_key") and rec.get("image_id") and rec.get("profile") == "q35-serial",
          "profile, snapshot key and image id", rec)
    calls = rec.get("tool_calls", [])
    check(len(calls) == 1 and calls[0].get("provider") == "calc" and
          calls[0].get("tool") == "add" and calls[0].get("input") == {"a": 2, "b": 40} and
          calls[0].get("ok") is True and (calls[0].get("policy") or {}).get("action") == "allow",
          "the tool call with its policy decision", calls)
    # SANDBOX_RECORDS=off: no record.
    rc, out, err = sandbox(dict(env, SANDBOX_RECORDS="off"), "run", "--no-serve", "--lang",
                           "javascript", "-", code="1")
    rc2, out2, _ = sandbox(env, "records", "list", "--json")
    check(rc == 0 and len(json.loads(out2)) == 1, "SANDBOX_RECORDS=off records nothing", out2)


def start_serve(env, sock, db, log, *extra):
    serve = subprocess.Popen([SANDBOX, "serve", "--socket", sock, "--db", db, "--pool", "1",
                              "--prestart", "0", *extra], env=env, stdout=log, stderr=log)
    ok = wait_for(lambda: serve.poll() is None and status(sock)["ready"] == 1, 180,
                  "serve's pool")
    return serve, ok


def serve_kill9(env, tmp):
    sock = os.path.join(tmp, "s", "sandbox.sock")
    db = os.path.join(tmp, "serve", "sandbox.db")
    senv = dict(env, SANDBOX_SERVE_SOCKET=sock)
    log = open(os.path.join(tmp, "serve.log"), "w+")
    procs = []
    try:
        serve, ok = start_serve(senv, sock, db, log)
        procs.append(serve)
        if not ok:
            return
        rc, out, err = sandbox(senv, "run", "--lang", "python", "--json", "-", code="print(6*7)")
        rep = json.loads(out) if out.startswith("{") else {}
        done_id = rep.get("id")
        check(rc == 0 and rep.get("start") == "pool" and done_id, f"a run through serve: {out!r}")
        loop = subprocess.Popen([SANDBOX, "run", "--lang", "javascript", "--timeout", "600", "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=senv)
        procs.append(loop)
        loop.stdin.write(b"while (true) {}")
        loop.stdin.close()
        pids = []
        wait_for(lambda: pids.extend(status(sock)["running_pids"]) or len(pids) == 1, 60,
                 "the looping run's QEMU")
        time.sleep(1)  # the execute is out: the record is running
        serve.send_signal(signal.SIGKILL)
        serve.wait()
        for pid in pids[:1]:
            wait_for(lambda: not alive(pid), 20, f"QEMU {pid} dying with serve (PDEATHSIG)")
        try:
            loop.wait(timeout=30)  # its server is gone
        except subprocess.TimeoutExpired:
            check(False, "the looping client did not end when serve died")
        # A finished record 40 days old: the next start's retention (default 30 days) drops it.
        with sqlite3.connect(db) as c:
            c.execute("INSERT INTO executions (id, front_end, language, code, code_sha256,"
                      " timeout_ms, output_limit, status, created_at) VALUES ('old-1', 'serve',"
                      " 'python', '1', ?, 1000, 100, 'ok', ?)",
                      ("0" * 64, int(time.time() * 1000) - 40 * 86400 * 1000))
        serve2, ok = start_serve(senv, sock, db, log)
        procs.append(serve2)
        rc, out, err = sandbox(env, "records", "list", "--json", "--db", db)
        rows = {r["id"]: r for r in json.loads(out)} if rc == 0 else {}
        check(len(rows) == 2 and "old-1" not in rows,
              "two records; one 40 days old pruned at the start (--keep-days 30)", rows)
        rec = show(env, done_id, "--db", db)
        check(rec.get("status") == "ok" and rec.get("stdout") == "42\n" and
              rec.get("front_end") == "serve" and len(rec.get("entropy") or "") == 128,
              "the finished record survived kill -9 intact", rec)
        other = [r for i, r in rows.items() if i != done_id]
        check(len(other) == 1 and other[0]["status"] == "interrupted",
              "the in-flight record is interrupted at the next start", other)
        serve2.send_signal(signal.SIGTERM)
        serve2.wait(timeout=60)
    finally:
        end(procs, log)


def end(started, log):
    """Kill what of @started (our own Popens) still runs, and close @log, printed on failure."""
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()
    if failures:
        log.seek(0)
        print("serve's log:\n" + log.read())
    log.close()


def serve_keep_mib(env, tmp):
    """--keep-mib 1: each run's record holds 400 KiB of output, more than a tenth of the bound,
    so each finish asks for a prune; two fit in 1 MiB, three do not."""
    sock = os.path.join(tmp, "k", "sandbox.sock")
    db = os.path.join(tmp, "keep", "sandbox.db")
    senv = dict(env, SANDBOX_SERVE_SOCKET=sock)
    log = open(os.path.join(tmp, "serve-keep.log"), "w+")
    serve = None
    try:
        serve, ok = start_serve(senv, sock, db, log, "--keep-mib", "1")
        if not ok:
            return
        ids = []
        for i in range(3):
            rc, out, err = sandbox(senv, "run", "--lang", "python", "--json", "-",
                                   code=f"print('{i}' * 400 * 1024)")
            rep = json.loads(out) if out.startswith("{") else {}
            check(rc == 0 and rep.get("id"), f"run {i} through serve --keep-mib 1: rc {rc} {err!r}")
            ids.append(rep.get("id"))

        def left():
            rc, out, _ = sandbox(env, "records", "list", "--json", "--db", db)
            return [r["id"] for r in json.loads(out)] if rc == 0 else None
        wait_for(lambda: left() == [ids[2], ids[1]], 30,
                 "the oldest run's record pruned by bytes (the newest two kept)")
        check(left() == [ids[2], ids[1]], "records after --keep-mib 1", left())
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
    finally:
        end([serve] if serve is not None else [], log)


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")):
        print("skipped: the guest image is not built")
        return 77
    with tempfile.TemporaryDirectory(prefix="sbx-records-") as tmp:
        rt = os.path.join(tmp, "rt")
        os.mkdir(rt, 0o700)
        env = dict(os.environ, SANDBOX_STATE_DIR=os.path.join(tmp, "state"), XDG_RUNTIME_DIR=rt)
        env.pop("SANDBOX_RECORDS", None)
        local_run(env)
        serve_kill9(env, tmp)
        serve_keep_mib(env, tmp)
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failed")
    return 1 if failures else 0


sys.exit(main())
