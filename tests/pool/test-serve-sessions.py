#!/usr/bin/env python3
"""Sessions through `sandbox serve`'s socket with `sandbox session` (docs/cli.md; messages:
docs/pool.md, "Sessions over the socket"). Usage: test-serve-sessions.py SANDBOX

Starts serve --pool 1 on a socket, a runtime directory and a state directory of its own (real
VMs; the snapshot is made first if missing), then:
  - `session new` prints an id; `status` lists the session's QEMU (session_pids), a child of
    serve; `session ls` and `show` show it ready;
  - three executions build state: x = 41 and a function; x += 1 with output; --entry calls the
    function with --args/--kwargs (--json report: its result). STATE: the second sees x and the
    third the function, each in the same VM (the QEMU of `show` unchanged). These need the
    guest to keep its runner (done.kept); with an image whose guest does not, the session ends
    after the first execution and they are reported as skipped, not passed;
  - a raw `run` naming an unknown session is answered not_found; one naming a profile too,
    bad_request; while an execution runs in the session another is refused (`busy`, exit 125)
    and so is a put (exit 1);
  - a 1.5 MiB binary file put (two pieces) and got back the same (SHA-256), read by code in the
    session; `files` lists it; `rmfile` deletes it; a get of it then exits 1;
  - `session rm`: the session ends (`deleted`), its QEMU is reaped and leaves `session_pids`;
    an exec in it then exits 125 (ended);
  - SIGTERM: serve exits 0, and every QEMU `status` ever named (pooled, pre-started, the
    session's) is gone, as are serve's children, the socket and the VM runtime directories.
Every process is tracked by PID. Exit 77 (skipped) when the guest image is not built."""
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys

# The helpers of test-serve.py (check, status, wait_for, ...); its main() does not run on import.
_spec = importlib.util.spec_from_file_location(
    "test_serve", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-serve.py"))
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)
check, status, frame = ts.check, ts.status, ts.frame

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
seen_pids = set()  # every QEMU `status` named: all must be gone after SIGTERM
skipped = []


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_seen(rt):
    """SIGKILL the QEMUs of our serve still alive: from its status, in our runtime dir @rt."""
    for pid in seen_pids:
        if ts.alive(pid) and rt in cmdline(pid):
            os.kill(pid, signal.SIGKILL)


def session(env, *args, stdin=b"", timeout=180):
    p = subprocess.run([SANDBOX, "session", *args], input=stdin, capture_output=True, env=env,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def pids(sock):
    """The QEMUs of serve's status, by kind (each also remembered in seen_pids)."""
    s = status(sock)
    kinds = {k: set(s.get(k, [])) for k in
             ("ready_pids", "running_pids", "prestarted_pids", "session_pids")}
    for v in kinds.values():
        seen_pids.update(v)
    return kinds


def show(env, sid):
    rc, out, err = session(env, "show", sid, "--json")
    return json.loads(out) if rc == 0 else {"error": err}


def raw(sock, request):
    """One request straight on the socket: its first answer that is not output."""
    return ts.serve_run(sock, request)


def build_state(env, sock, sid, qemu):
    """Three executions building state in one VM; False if the guest keeps no state."""
    rc, out, err = session(env, "exec", sid, "--lang", "python",
                           "x = 41\ndef f(a, b=0):\n    return a * 10 + b + x\n")
    s = show(env, sid)
    if s.get("status") == "ended" and "state is gone" in (s.get("end_reason") or ""):
        skipped.append("state across executions (x, f) and in one VM: the guest image does not "
                       f"keep its runner (done.kept): {s.get('end_reason')}")
        return False
    check(rc == 0 and s.get("status") == "ready" and s.get("executions") == 1,
          f"exec 1: rc {rc} {err!r}, session {s}")
    rc, out, err = session(env, "exec", sid, "--lang", "python", "x += 1\nprint('x is', x)")
    check(rc == 0 and out == "x is 42\n", f"STATE: exec 2 sees x of exec 1: rc {rc} {out!r} {err!r}")
    rc, out, err = session(env, "exec", sid, "--lang", "python", "--entry", "f", "--args", "[3]",
                           "--kwargs", '{"b": 5}', "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("result") == 3 * 10 + 5 + 42 and rep.get("start") == "session",
          f"STATE: exec 3 calls f of exec 1 with x of exec 2: rc {rc} {out!r} {err!r}")
    s = show(env, sid)
    check(s.get("executions") == 3 and s.get("status") == "ready" and s.get("qemu_pid") == qemu,
          f"STATE: three executions in the one VM {qemu}: {s}")
    return True


def busy(env, sock, sid):
    """One execution at a time: a second one and a put are refused while one runs."""
    slow = subprocess.Popen([SANDBOX, "session", "exec", sid, "--lang", "python",
                             "import time\nprint('up', flush=True)\ntime.sleep(4)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        up = slow.stdout.readline()
        rc, out, err = session(env, "exec", sid, "--lang", "python", "1")
        check(up == b"up\n" and rc == 125 and "busy" in err,
              f"a second exec while one runs: busy, 125: {up!r} rc {rc} {err!r}")
        rc, out, err = session(env, "put", sid, "-", "x.txt", stdin=b"x")
        check(rc == 1 and "busy" in err, f"a put while an exec runs: busy, 1: rc {rc} {err!r}")
        check(set(pids(sock)["running_pids"]) >= {show(env, sid).get("qemu_pid")},
              "the session's QEMU runs the execution")
        check(slow.wait(timeout=60) == 0, f"the slow exec ends well: {slow.returncode}")
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
        slow.stdout.close()
        slow.stderr.close()


def files(env, tmp, sid, stateful):
    data = os.urandom(3 * 1024 * 1024 // 2) + b"\0\xff"
    local, got = os.path.join(tmp, "in.bin"), os.path.join(tmp, "got.bin")
    with open(local, "wb") as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    rc, out, err = session(env, "put", sid, local, "data/in.bin")
    check(rc == 0 and out == f"data/in.bin: {len(data)} bytes, sha256 {sha}\n",
          f"put 1.5 MiB: rc {rc} {out!r} {err!r}")
    rc, out, err = session(env, "get", sid, "data/in.bin", got)
    with open(got, "rb") as f:
        check(rc == 0 and f.read() == data, f"get: the same bytes: rc {rc} {err!r}")
    rc, out, err = session(env, "exec", sid, "--lang", "python",
                           "import hashlib\n"
                           "print(hashlib.sha256(open('data/in.bin', 'rb').read()).hexdigest())")
    if stateful:
        check(rc == 0 and out == sha + "\n", f"the code reads the put file: {rc} {out!r} {err!r}")
    rc, out, err = session(env, "files", sid, "--json")
    entries = json.loads(out) if rc == 0 else []
    check({"path": "data/in.bin", "type": "file", "size": len(data)}.items() <=
          next((e for e in entries if e.get("path") == "data/in.bin"), {}).items(),
          f"files lists it: {rc} {out!r} {err!r}")
    rc, out, err = session(env, "rmfile", sid, "data/in.bin")
    check(rc == 0 and out == "deleted data/in.bin\n", f"rmfile: {rc} {out!r} {err!r}")
    rc, out, err = session(env, "get", sid, "data/in.bin", "-")
    check(rc == 1, f"a get of the deleted file: 1: {rc} {err!r}")


def body(serve, sock, rt, env, tmp):
    if not ts.wait_for(lambda: serve.poll() is None and status(sock)["ready"] == 1, 300,
                       "the pool full (the snapshot made if missing)"):
        return
    rc, out, err = session(env, "new", "--idle-timeout", "300")
    sid = out.strip()
    check(rc == 0 and sid.startswith("se_"), f"session new: rc {rc} {out!r} {err!r}")
    if rc != 0:
        return
    qemu = show(env, sid).get("qemu_pid")
    check(qemu in pids(sock)["session_pids"] and qemu in ts.descendants(serve.pid),
          f"status lists the session's QEMU {qemu}, a child of serve")
    rc, out, err = session(env, "ls")
    check(rc == 0 and f"{sid}\tready\tq35-serial\t0\t" in out, f"session ls: {out!r} {err!r}")

    msg = raw(sock, {"type": "run", "language": "python", "code": "1", "session": "se_nope"})
    check(msg and msg["type"] == "error" and msg["code"] == "not_found", f"unknown session: {msg}")
    msg = raw(sock, {"type": "run", "language": "python", "code": "1", "session": sid,
                     "profile": "q35-serial"})
    check(msg and msg["type"] == "error" and msg["code"] == "bad_request", f"with a profile: {msg}")

    stateful = build_state(env, sock, sid, qemu)
    if not stateful:  # the session ended: the rest on a fresh one
        rc, out, err = session(env, "new")
        sid = out.strip()
        qemu = show(env, sid).get("qemu_pid")
    else:
        busy(env, sock, sid)
    files(env, tmp, sid, stateful)

    rc, out, err = session(env, "rm", sid)
    check(rc == 0 and out == f"{sid} ended (deleted)\n", f"session rm: {rc} {out!r} {err!r}")
    ts.wait_for(lambda: not ts.alive(qemu) and qemu not in pids(sock)["session_pids"], 15,
                f"the session's QEMU {qemu} to be reaped and gone from the status")
    rc, out, err = session(env, "exec", sid, "--lang", "python", "1")
    check(rc == 125 and "ended" in err, f"an exec in the ended session: {rc} {err!r}")

    ts.wait_for(lambda: status(sock)["ready"] == 1, 60, "the pool full again")
    pids(sock)
    kids = ts.descendants(serve.pid)
    ts.sigterm_exits_0(serve, 20)
    ts.wait_for(lambda: not any(ts.alive(p) for p in seen_pids | kids), 10,
                f"every QEMU of serve gone: {sorted(seen_pids)}, children {sorted(kids)}")
    check(not os.path.exists(sock), "socket removed")
    check(os.listdir(rt) == [], f"no VM runtime dir left: {os.listdir(rt)}")


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")):
        print("skipped: the guest image is not built")
        return 77
    ts.with_serve("sbx-serve-sessions-", ["--pool", "1"], body, reap=kill_seen)
    for s in skipped:
        print("SKIPPED (not passed):", s)
    for f in ts.failures:
        print("FAIL:", f)
    print(f"{ts.checks[0]} checks, {len(ts.failures)} failed, {len(skipped)} skipped")
    return 1 if ts.failures else 0


if __name__ == "__main__":
    sys.exit(main())
