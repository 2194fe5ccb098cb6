"""Helpers to drive a `sandbox serve` from outside: starting and stopping one, its status
request, waiting for a full pool, PSS of its VMs, one timed `sandbox run` through it, the
claim-to-done figures. Used by bench-serve.py, bench_http_lib.py and scripts/bench."""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

status = procs.serve_status


def start_serve(sandbox, sock, *args, cwd=None, env=None):
    """`sandbox serve --socket SOCK ARGS...` (stderr dropped); stop it with stop_serve(). Its
    records go to a state directory beside the socket's (each serve locks its database)."""
    state = os.path.join(os.path.dirname(os.path.dirname(sock)), "state")
    return subprocess.Popen([sandbox, "serve", "--socket", sock, *args],
                            env=dict(env or os.environ, SANDBOX_SERVE_SOCKET=sock,
                                     SANDBOX_STATE_DIR=state),
                            stderr=subprocess.DEVNULL, cwd=cwd)


def stop_serve(serve):
    serve.send_signal(signal.SIGTERM)
    serve.wait(timeout=30)


def wait_full(sock, n=2, timeout=180):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if status(sock)["ready"] >= n:
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit("the pool did not fill")


def wait_prestarted(sock, n, timeout=60):
    end = time.monotonic() + timeout
    while len(status(sock)["prestarted_pids"]) < n:
        if time.monotonic() > end:
            raise SystemExit("no pre-started QEMU")
        time.sleep(0.05)


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


def descendants(pid):
    """Every process below @pid (children, their children, ...)."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def pooled_vm_pss_mib(serve_pid, sock):
    """PSS of the pool's VMs in MiB: every process serve started (each VM's jail, QEMU, bridge
    if any) but the subtree of a pre-started QEMU, which is not pooled."""
    pre = set(status(sock)["prestarted_pids"])
    kib = 0
    for top in children(serve_pid):
        tree = [top] + descendants(top)
        if not pre & set(tree):
            kib += sum(pss_kib(p) for p in tree)
    return kib / 1024


def one_report(sandbox, env, lang, code):
    """One `sandbox run --json` through the server: (client wall ms, the report)."""
    t = time.monotonic()
    p = subprocess.run([sandbox, "run", "--lang", lang, "--json", "-"], input=code.encode(),
                       capture_output=True, env=env, timeout=120)
    ms = (time.monotonic() - t) * 1000
    rep = json.loads(p.stdout)
    assert rep["status"] == "ok" and rep["start"] == "pool", p.stdout
    return ms, rep


def claim_to_done(rep):
    """The VM in hand to the done frame queued: what the pool cannot hide (serve's clock)."""
    return rep["serve_ms"] - rep["claim_ms"]


def pool_runs(sandbox, sock, lang, code, runs, pool=2):
    """@runs requests, each with the pool full again first: (walls, reports)."""
    env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock)
    walls, reps = [], []
    for _ in range(runs):
        wait_full(sock, pool)
        w, r = one_report(sandbox, env, lang, code)
        walls.append(w)
        reps.append(r)
    return walls, reps


def summary(values):
    return f"median {statistics.median(values):6.0f} ms, p95 {pct(values, 0.95):6.0f} ms"


def one(sandbox, env, lang, code):
    t = time.monotonic()
    p = subprocess.run([sandbox, "run", "--lang", lang, "--json", "-"], input=code.encode(),
                       capture_output=True, env=env, timeout=120)
    ms = (time.monotonic() - t) * 1000
    rep = json.loads(p.stdout)
    assert rep["status"] == "ok" and rep["start"] == "pool", p.stdout
    return ms, rep["duration_ms"], rep["claim_ms"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

