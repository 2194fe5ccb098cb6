#!/usr/bin/env python3
"""`sandbox serve` with a pool per profile (docs/pool.md). Usage: test-serve-profiles.py SANDBOX

Checks that a profile given twice, 5 profiles, --pool/--prestart over the totals' caps (32 VMs
in the pools together, 8 pre-started), and bad --pool/--prestart values (not a number, NAME=N
for a profile not pooled or twice, N twice) are usage errors. Starts serve --pool 1 --pool
microvm-serial=2 --prestart 1 --prestart q35-serial=0 --profile q35-serial --profile
microvm-serial on a socket in a private temp dir (real VMs; the snapshots are made first if
missing), checks that `status` lists both pools (the default's fields also at the top level)
with their own sizes (1 and 2) and pre-started counts (0 and 1), ready and pre-started QEMUs,
each of its profile's machine type, that a run with --profile
microvm-serial is served from that pool and one without a profile from the default's, that a
request for a profile not pooled is answered `unavailable`, that a run of the second profile in
flight is counted in its pool's `running` (not the default's), then SIGTERMs serve and checks
that the run ends (125, shutting down) and no process, socket or runtime directory is left. Every process is tracked by PID.
Exit 77 (skipped) when the guest image is not built."""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile

# The helpers of test-serve.py (status, check, run, ...); its main() does not run on import.
_spec = importlib.util.spec_from_file_location(
    "test_serve", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-serve.py"))
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)
check, status, run, frame = ts.check, ts.status, ts.run, ts.frame

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
DEFAULT, OTHER = "q35-serial", "microvm-serial"
SIZES = {DEFAULT: 1, OTHER: 2}  # --pool 1 --pool microvm-serial=2
PRESTART = {DEFAULT: 0, OTHER: 1}  # --prestart 1 --prestart q35-serial=0


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def pools_full(sock):
    s = status(sock)
    p = s.get("profiles", {})
    return all(name in p and p[name]["ready"] == SIZES[name] and
               len(p[name]["prestarted_pids"]) == PRESTART[name] for name in (DEFAULT, OTHER))


def claims(sock):
    p = status(sock)["profiles"]
    return p[DEFAULT]["claimed_total"], p[OTHER]["claimed_total"]


def unavailable(sock):
    """A run for a profile the server does not pool: `unavailable`, so a client runs it itself."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock)
        s.settimeout(5)
        s.sendall(frame({"type": "run", "language": "python", "code": "1", "profile": "q35"}))
        reply = s.recv(65536)
    check(b'"code":"unavailable"' in reply, f"a profile not pooled is unavailable: {reply!r}")


def usage_errors(tmp):
    """Bad profile lists and caps over the totals: exit 2 before any VM or socket."""
    sock = os.path.join(tmp, "u", "sandbox.sock")
    for args in (["--profile", DEFAULT, "--profile", DEFAULT],
                 [a for n in ("q35", DEFAULT, "microvm", OTHER, "q35-vsock-kernel")
                  for a in ("--profile", n)],
                 ["--pool", "17", "--profile", DEFAULT, "--profile", OTHER],
                 ["--pool", f"{DEFAULT}=20", "--pool", f"{OTHER}=13", "--profile", DEFAULT,
                  "--profile", OTHER],
                 ["--pool", "x"], ["--pool", "1", "--pool", "2"], ["--pool", "q35=1"],
                 ["--pool", f"{DEFAULT}=1", "--pool", f"{DEFAULT}=2"],
                 ["--prestart", "q35=1"], ["--prestart", "1", "--prestart", "0"],
                 ["--prestart", f"{DEFAULT}=9"],
                 ["--prestart", "5", "--profile", DEFAULT, "--profile", OTHER]):
        p = subprocess.run([SANDBOX, "serve", "--socket", sock, *args], capture_output=True,
                           timeout=30)
        check(p.returncode == 2 and not os.path.exists(os.path.dirname(sock)),
              f"serve {' '.join(args)}: exit 2, got {p.returncode} {p.stderr!r}")


def body(serve, sock, rt, env, tmp):
    if not ts.wait_for(lambda: serve.poll() is None and pools_full(sock), 300,
                       "both pools full (snapshots made if missing)"):
        return
    s = status(sock)
    p = s["profiles"]
    check(s["profile"] == DEFAULT and sorted(p) == sorted([DEFAULT, OTHER]),
          f"the default's fields at the top level and both profiles listed: {s}")
    check(s["pool_size"] == 1 and p[DEFAULT]["pool_size"] == 1 and p[OTHER]["pool_size"] == 2,
          f"each pool has its own size: {s}")
    check(s["prestart"] == 0 and p[DEFAULT]["prestart"] == 0 and p[OTHER]["prestart"] == 1,
          f"each pool has its own pre-started count: {s}")
    check(s["ready_pids"] == p[DEFAULT]["ready_pids"] and
          s["prestarted_pids"] == p[DEFAULT]["prestarted_pids"],
          f"the top-level PIDs are the default pool's: {s}")
    kids = ts.descendants(serve.pid)
    for name, machine in ((DEFAULT, "q35"), (OTHER, "microvm")):
        pids = p[name]["ready_pids"] + p[name]["prestarted_pids"]
        check(len(pids) == SIZES[name] + PRESTART[name] and set(pids) <= kids,
              f"{name}: serve's QEMUs {pids} in {kids}")
        check(all(f"-machine {machine}" in cmdline(pid) or f"-M {machine}" in cmdline(pid)
                  for pid in pids), f"{name}: its QEMUs run a {machine} machine")
    other_pids = set(p[OTHER]["ready_pids"])

    # A run for the second profile is served from its pool: its VM is the one that was ready.
    rc, out, err = run(env, "import os\nprint(6*7)", "python", "--profile", OTHER, "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("start") == "pool" and rep.get("stdout") == "42\n",
          f"--profile {OTHER} through serve: rc {rc} out {out!r} err {err!r}")
    check(claims(sock) == (0, 1), f"claimed from {OTHER}'s pool: {claims(sock)}")
    ts.wait_for(lambda: (lambda q: q["ready"] == 2 and set(q["ready_pids"]) - other_pids)(
        status(sock)["profiles"][OTHER]), 60, f"{OTHER}'s pool to refill with another VM")

    # Without a profile: the default's pool.
    rc, out, err = run(env, "console.log('default')", "javascript", "--json")
    rep = json.loads(out) if out.startswith("{") else {}
    check(rc == 0 and rep.get("start") == "pool" and rep.get("stdout") == "default\n",
          f"no profile through serve: rc {rc} out {out!r} err {err!r}")
    check(claims(sock) == (1, 1), f"claimed from {DEFAULT}'s pool: {claims(sock)}")
    # Naming the default explicitly is the same pool.
    rc, out, err = run(env, "print(1)", "python", "--profile", DEFAULT, "--json")
    check(rc == 0 and '"start":"pool"' in out and claims(sock) == (2, 1),
          f"--profile {DEFAULT} through serve: rc {rc} out {out!r} claims {claims(sock)}")

    unavailable(sock)

    # A run of the second profile in flight counts there, not at the top level (the default's).
    ts.wait_for(lambda: pools_full(sock), 60, "both pools full again")
    client = subprocess.Popen([SANDBOX, "run", "--lang", "python", "--profile", OTHER, "-"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    client.stdin.write(b"import time\nprint('up', flush=True)\ntime.sleep(60)")
    client.stdin.close()
    up = client.stdout.readline()
    s = status(sock)
    q = s["profiles"][OTHER]
    check(up == b"up\n" and q["running"] == 1 and len(q["running_pids"]) == 1 and
          s["running"] == 0 and s["running_pids"] == [],
          f"the running VM is {OTHER}'s: {up!r} {s}")

    # SIGTERM: every profile's VMs (pooled, pre-started, running) killed and reaped; the run
    # ends `terminated`; nothing left.
    ts.wait_for(lambda: pools_full(sock), 60, "both pools full besides the run")
    kids = ts.descendants(serve.pid)
    check(len(kids) >= 5 and set(q["running_pids"]) <= kids,
          f"serve has 3 pooled, 1 pre-started and a running QEMU: {kids}")
    ts.sigterm_exits_0(serve, 15)
    try:
        client.wait(timeout=15)
    except subprocess.TimeoutExpired:
        client.kill()
        client.wait()
    err = client.stderr.read()
    client.stdout.close()
    client.stderr.close()
    check(client.returncode == 125 and b"shutting down" in err,
          f"the run in flight ends with the server: rc {client.returncode} err {err!r}")
    ts.wait_for(lambda: not any(ts.alive(k) for k in kids), 10, "serve's children to be gone")
    check(not os.path.exists(sock), "socket removed")
    check(os.listdir(rt) == [], f"no VM runtime dir left: {os.listdir(rt)}")


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")):
        print("skipped: the guest image is not built")
        return 77
    with tempfile.TemporaryDirectory(prefix="sbx-serve-usage-") as tmp:
        usage_errors(tmp)
    ts.with_serve("sbx-serve-profiles-", ["--pool", "1", "--pool", f"{OTHER}=2", "--prestart", "1",
                                          "--prestart", f"{DEFAULT}=0", "--profile", DEFAULT,
                                          "--profile", OTHER], body)
    for f in ts.failures:
        print("FAIL:", f)
    print(f"{ts.checks[0]} checks, {len(ts.failures)} failed")
    return 1 if ts.failures else 0


if __name__ == "__main__":
    sys.exit(main())
