#!/usr/bin/env python3
"""`sandbox serve` with real VMs (docs/pool.md). Usage: test-serve.py SANDBOX_BINARY [PROFILE]

PROFILE (e.g. q35-serial) is given to serve as --profile: the pool over another attachment.

Starts serve --pool 2 --prestart 1 on a socket in a private temp dir, runs JavaScript,
TypeScript (also straight on the socket) and Python through it with `sandbox run`, checks that the pooled VMs said hello (and warmed up)
before their claim, that no VM serves two executions, that a burst uses the pre-started QEMU,
kills a pooled VM's QEMU and the pre-started QEMU (PIDs from a status request) and waits for
their replacements, the same for a QEMU stopped with SIGSTOP (it stops answering pings), then
SIGTERMs serve and checks that no process, socket, runtime directory or /dev/shm file is left.
Every process is tracked by PID.
Exit 77 (skipped) when the guest image or the bridge is not built."""
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402
from frames import frame  # noqa: E402

status = procs.serve_status
descendants = procs.descendants
alive = procs.alive
SANDBOX = sys.argv[1]
PROFILE = ["--profile", sys.argv[2]] if len(sys.argv) > 2 else []
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
failures = []
checks = [0]


def bridged(profile):
    """Whether @profile reaches the agent through the bridge (a process per VM)."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    d = os.environ.get("SANDBOX_PROFILES_DIR", os.path.join(top, "qemu-profiles"))
    with open(os.path.join(d, profile + ".json")) as f:
        return json.load(f).get("channel", "vsock-bridge") == "vsock-bridge"


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except (OSError, RuntimeError):
            pass
        time.sleep(0.05)
    check(False, f"timed out waiting for {what}")
    return False


def run(env, code, lang, *extra):
    p = subprocess.run([SANDBOX, "run", "--lang", lang, *extra, "-"], input=code.encode(),
                       capture_output=True, env=env, timeout=120)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def closed_by_server(s):
    s.settimeout(5)
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def serve_run(sock, request):
    """One `run` straight on the socket (no `sandbox run`): the done message."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(120)
        s.connect(sock)
        s.sendall(frame(request))
        buf = b""
        while True:
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                buf += chunk
            n = struct.unpack(">I", buf[:4])[0]
            msg, buf = json.loads(buf[4:4 + n]), buf[4 + n:]
            if msg["type"] in ("done", "error"):
                return msg


def typescript(env, sock):
    """TypeScript through serve: a pooled VM's node runner strips the types (warmed up for it
    in the pool), from `sandbox run --lang typescript` and from a client on the socket; an enum
    is refused with its name; no warning reaches stderr."""
    rc, out, err = run(env, "interface P { x: number }\nconst p: P = { x: 6 * 7 };\n"
                       "console.log(p.x as number);", "typescript")
    check((rc, out, err) == (0, "42\n", ""),
          f"typescript through serve: rc {rc} out {out!r} err {err!r}")
    rc, out, err = run(env, "const a = 1;\nenum E { A }", "typescript")
    check(rc == 1 and "TypeScript enum is not supported" in err and "main.ts:2" in err,
          f"an enum through serve: rc {rc} out {out!r} err {err!r}")
    done = serve_run(sock, {"type": "run", "language": "typescript", "collect": True,
                            "code": "const f = <T,>(x: T): T[] => [x, x];\nf<string>('ts')"})
    rep = (done or {}).get("report", {})
    check(done is not None and done["type"] == "done" and rep.get("result") == ["ts", "ts"] and
          rep.get("start") == "pool" and rep.get("stderr") == "",
          f"typescript on the socket: {done}")


def hostile(sock):
    """What a client sends is untrusted: the server drops it, answers errors, and lives on."""
    cases = [struct.pack(">I", 5 * 1024 * 1024) + b"x" * 100,  # over the frame limit
             struct.pack(">I", 0),                              # empty frame
             frame(b"not json"), frame(b"[1,2]")]
    for data in cases:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
            s.sendall(data)
            check(closed_by_server(s), f"server closes a connection that sent {data[:12]!r}")
    for bad in [{"type": "run"}, {"type": "run", "language": "cobol", "code": "1"},
                {"type": "run", "language": "python", "code": "1", "timeout_ms": -1},
                {"type": "run", "language": "python", "code": "1", "tools": "rel/path"},
                {"type": "nope"}]:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock)
            s.settimeout(5)
            s.sendall(frame(bad))
            reply = s.recv(65536)
            check(b'"type":"error"' in reply and b"bad_request" in reply,
                  f"bad request {bad} answered with an error: {reply[:200]!r}")
    # A client that asks for lots of output and never reads is dropped and its run ended.
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock)
        s.sendall(frame({"type": "run", "language": "python", "output_limit": 256 << 20,
                         "code": "import sys\nfor i in range(64):\n"
                                 "    sys.stdout.write('x' * (1 << 20))\nsys.stdout.flush()"}))
        wait_for(lambda: status(sock)["running"] == 1, 30, "the flood to run")
        wait_for(lambda: status(sock)["running"] == 0, 120, "the non-reading client's run to end")
    conns = []
    for _ in range(24):
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock)
        conns.append(c)
    time.sleep(0.3)
    dropped = sum(1 for c in conns[16:] if closed_by_server(c))
    check(dropped == 8, f"connections beyond 16 are closed: {dropped} of 8")
    for c in conns:
        c.close()
    time.sleep(0.1)
    check(status(sock)["running"] == 0, "the server still answers")


def sigterm_exits_0(serve, timeout):
    """SIGTERM @serve and check that it exits 0 within @timeout s."""
    serve.send_signal(signal.SIGTERM)
    try:
        rc = serve.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"serve exits 0 on SIGTERM, got {rc}")


def with_serve(prefix, args, body, reap=None):
    """`sandbox serve --socket SOCK @args` in a fresh scratch dir, with a runtime and a state dir
    of its own there; @body(serve, sock, rt, env, tmp) run (an exception in it is a failed
    check), then serve killed if it still runs, @reap(rt) called (to end what the test saw serve
    start, by PID), and serve's log printed if a check failed. The dir is removed at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        sock = os.path.join(tmp, "s", "sandbox.sock")
        rt = os.path.join(tmp, "rt")
        os.mkdir(rt, 0o700)
        env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock, XDG_RUNTIME_DIR=rt,
                   SANDBOX_STATE_DIR=os.path.join(tmp, "state"))
        with open(os.path.join(tmp, "serve.log"), "w+") as log:
            serve = subprocess.Popen([SANDBOX, "serve", "--socket", sock, *args], env=env,
                                     stdout=log, stderr=log)
            try:
                body(serve, sock, rt, env, tmp)
            except Exception as e:  # noqa: BLE001 - a broken step is a failure; serve ends below
                check(False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            finally:
                if serve.poll() is None:
                    serve.kill()
                    serve.wait()
                if reap is not None:
                    reap(rt)
                log.seek(0)
                if failures:
                    print("serve's log:\n" + log.read())


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")) or \
            not os.path.exists(os.environ.get("SANDBOX_BRIDGE", BUILD + "/bridge/sandbox-bridge")):
        print("skipped: the guest image or the bridge is not built")
        return 77
    shm_before = set(os.listdir("/dev/shm"))
    with_serve("sbx-serve-", ["--pool", "2", "--prestart", "1", *PROFILE], body)
    check(set(os.listdir("/dev/shm")) <= shm_before, "no new /dev/shm entry")
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


def body(serve, sock, rt, env, tmp):
    # Snapshot made if missing (~6-20 s), then two restores.
    end = time.monotonic() + 180
    while serve.poll() is None and time.monotonic() < end:
        try:
            s = status(sock)
            if s["ready"] == 2 and len(s["prestarted_pids"]) == 1:
                break
        except (OSError, RuntimeError):
            pass
        time.sleep(0.05)
    else:
        check(False, f"a full pool (serve exited {serve.poll()})")
        return
    st = os.stat(sock)
    check(stat.S_IMODE(st.st_mode) == 0o600, f"socket mode {oct(st.st_mode)}")
    check(stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700, "socket dir mode 0700")

    # Three requests through the pool: streamed JS, --json Python, streamed Python.
    rc, out, err = run(env, "console.log(6*7); process.exit(3)", "javascript")
    check((rc, out) == (3, "42\n"), f"js through serve: rc {rc} out {out!r} err {err!r}")
    time.sleep(0.5)  # the pool is full and idle: its VMs keep their session alive with pings
    rc, out, err = run(env, "import os\nopen('/tmp/sbx-marker','w').write('x')\nprint('wrote')",
                       "python", "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("start") == "pool" and rep.get("stdout") == "wrote\n",
          f"python --json through serve: rc {rc} out {out!r} err {err!r}")
    # The hello (and the runners' warm-up) was done in the pool, well before this claim.
    check(rep.get("hello_age_ms", -1) >= 400 and rep.get("hello_ms", 0) > 0 and
          rep.get("warmed") is True, f"hello done at pool time, with the warm-up: {out!r}")
    # A VM serves one execution: the next one must not see the file the previous one wrote.
    rc, out, err = run(env, "import os\nprint(os.path.exists('/tmp/sbx-marker'))", "python")
    check((rc, out) == (0, "False\n"), f"fresh VM per request: rc {rc} out {out!r} err {err!r}")
    rc, out, err = run(env, "console.log('x');\nthrow new Error('boom')", "javascript")
    check(rc == 1 and "boom" in err, f"js error through serve: rc {rc} err {err!r}")
    # Tool calls: the catalog goes as an absolute path; the server runs the provider.
    tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration",
                         "tools.json")
    rc, out, err = run(env, "const r = await tools.calc.add({a: 2, b: 40});\nr.result",
                       "javascript", "--tools", os.path.relpath(tools), "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("result") == 42 and len(rep.get("tool_calls", [])) == 1 and
          rep.get("start") == "pool", f"tool call through serve: rc {rc} out {out!r} err {err!r}")
    claimed = status(sock)["claimed_total"]
    check(claimed == 5, f"5 VMs claimed, got {claimed}")
    typescript(env, sock)
    # The report crosses the client unchanged: numbers no double holds keep their text.
    rc, out, err = run(env, '{"sum": 0.1 + 0.2, "big": 2**70, "neg": -0.0, "n": -9007199254740993}',
                       "python", "--json")
    check(rc == 0 and '"result":{"sum":0.30000000000000004,"big":1180591620717411303424,'
          '"neg":-0.0,"n":-9007199254740993}' in out,
          f"exact numbers through serve: rc {rc} out {out!r} err {err!r}")
    # A NUL byte in collected output: the report is JSON our client's strict parser accepts
    # (NUL as U+FFFD, as without serve), not a broken frame.
    rc, out, err = run(env, 'process.stdout.write("a\\u0000b\\n"); 7', "javascript", "--json")
    check(rc == 0 and '"result":7' in out and '"stdout":"a\ufffdb\\n"' in out,
          f"NUL in output through serve: rc {rc} out {out!r} err {err!r}")
    # MCP tools: the server starts and lists its tools while the request claims a VM; one that
    # never answers initialize fails the request (the loop goes on serving).
    mcp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp")
    rc, out, err = run(env, "(await tools.fake.echo({text: 'via serve'})).echo", "javascript",
                       "--tools", os.path.join(mcp, "fake-ok.json"), "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("result") == "via serve" and rep.get("start") == "pool",
          f"MCP call through serve: rc {rc} out {out!r} err {err!r}")
    rc, out, err = run(env, "1", "javascript", "--tools", os.path.join(mcp, "fake-silent.json"))
    check(rc == 125 and "cannot start the tools" in err and "initialize timed out" in err,
          f"MCP start-up timeout through serve: rc {rc} err {err!r}")
    rc, out, err = run(env, "console.log('ok')", "javascript", "--tools",
                       os.path.join(mcp, "fake-ok.json"))
    check(rc == 0 and out == "ok\n" and "warning: fake.remote: inputSchema not checked" in err,
          f"the tools' warnings reach the client: rc {rc} out {out!r} err {err!r}")

    # Three at once on a pool of two: the third VM is restored on demand, without the warm-up
    # (its claim waits for it); the restores take the pre-started QEMU first.
    wait_for(lambda: (lambda s: len(s["prestarted_pids"]) == 1 and s["ready"] == 2 and
                      s["starting"] == 0)(status(sock)), 60, "a full pool and a pre-started QEMU")
    # The clients are started first and read their code from stdin before they connect: written
    # to all three at once, their claims arrive within the refill delay (300 ms) even on a loaded
    # machine, where three process starts can take longer than that. A claim arriving later
    # finds the refill's VMs saying hello with the warm-up and takes one of them (documented).
    procs = [subprocess.Popen([SANDBOX, "run", "--lang", "python", "--json", "-"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
             for _ in range(3)]
    time.sleep(1)
    for i, p in enumerate(procs):
        p.stdin.write(f"print({i})".encode())
    for p in procs:
        p.stdin.close()
        p.stdin = None  # communicate() would flush it
    outs = [p.communicate(timeout=120) for p in procs]
    reps = [json.loads(o[0]) if o[0].startswith(b"{") else {} for o in outs]
    check([(p.returncode, r.get("stdout")) for p, r in zip(procs, reps)] ==
          [(0, "0\n"), (0, "1\n"), (0, "2\n")], f"3 concurrent runs: {outs}")
    # A VM whose hello began after its claim came (the claim waited for it) had no warm-up.
    waited = [r for r in reps if r.get("claim_ms", 0) >
              r.get("hello_age_ms", 0) + r.get("hello_ms", 0) + 5]
    check(len(waited) >= 1 and all(r.get("warmed") is False for r in waited),
          f"the VM restored for a waiting claim skips the warm-up: {reps}")
    # The pre-started QEMU went to the burst's on-demand restore or to the refill after it.
    for _ in range(2):
        wait_for(lambda: status(sock)["ready"] == 2, 60, "the pool to refill")
        rc, out, err = run(env, "print(1)", "python", "--json")
        reps.append(json.loads(out) if out.startswith("{") else {})
    check(any(r.get("prestarted") is True for r in reps),
          f"a restore used the pre-started QEMU: {reps}")

    hostile(sock)

    # A pooled VM whose QEMU dies is dropped (and reaped) and replaced.
    wait_for(lambda: status(sock)["ready"] == 2, 60, "the pool to refill")
    before = status(sock)
    victim = before["ready_pids"][0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: (lambda s: s["dropped_total"] > before["dropped_total"] and s["ready"] == 2
                      and victim not in s["ready_pids"])(status(sock)), 60,
             "the killed VM to be replaced")
    wait_for(lambda: not alive(victim), 10, "the killed QEMU to be reaped")
    rc, out, err = run(env, "print(1)", "python")
    check((rc, out) == (0, "1\n"), f"run after a replacement: rc {rc} out {out!r}")

    # A pre-started QEMU that dies is reaped and replaced.
    # Once the pool is full and nothing starts, no restore takes the pre-started QEMU away
    # between the wait and the look-up (the refill after the run above would).
    wait_for(lambda: (lambda s: s["ready"] == 2 and s["starting"] == 0 and
                      len(s["prestarted_pids"]) == 1)(status(sock)), 60,
             "a full pool and a pre-started QEMU")
    pre = status(sock)["prestarted_pids"][0]
    check(pre in descendants(serve.pid), f"the pre-started QEMU {pre} is serve's")
    os.kill(pre, signal.SIGKILL)
    wait_for(lambda: not alive(pre), 10, "the killed pre-started QEMU to be reaped")
    wait_for(lambda: (lambda p: len(p) == 1 and pre not in p)(status(sock)["prestarted_pids"]),
             60, "the pre-started QEMU to be replaced")

    # A pooled VM that stops answering (QEMU stopped: no exit, its agent does not answer the
    # pool's ping) is dropped within a few seconds, killed, reaped and replaced.
    wait_for(lambda: status(sock)["ready"] == 2, 60, "the pool to refill")
    before = status(sock)
    frozen = before["ready_pids"][0]
    os.kill(frozen, signal.SIGSTOP)
    wait_for(lambda: (lambda s: s["dropped_total"] > before["dropped_total"] and s["ready"] == 2
                      and frozen not in s["ready_pids"])(status(sock)), 30,
             "the frozen VM to be replaced")
    wait_for(lambda: not alive(frozen), 10, "the frozen QEMU to be killed and reaped")

    # --no-serve restores here, as before.
    rc, out, err = run(env, "console.log(1)", "javascript", "--no-serve", "--json")
    check(rc == 0 and '"start":"restore"' in out, f"--no-serve: rc {rc} out {out!r} err {err!r}")

    # SIGTERM: stop, kill every VM, remove the socket; exit 0; nothing left.
    kids = descendants(serve.pid)
    # Two pooled VMs and a pre-started one: a QEMU each, and a bridge each unless the profile's
    # channel is in QEMU.
    per_vm = 2 if bridged(status(sock)["profile"]) else 1
    check(len(kids) >= 3 * per_vm,
          f"serve has its pooled and pre-started QEMUs (and bridges): {kids}")
    check(set(status(sock)["prestarted_pids"]) <= kids, "the pre-started QEMU is serve's")
    sigterm_exits_0(serve, 15)
    wait_for(lambda: not any(alive(p) for p in kids), 10, "serve's children to be gone")
    check(not os.path.exists(sock), "socket removed")
    check(not os.path.exists(os.path.dirname(sock)), "socket dir removed")
    check(os.listdir(rt) == [], f"no VM runtime dir left: {os.listdir(rt)}")


if __name__ == "__main__":
    sys.exit(main())
