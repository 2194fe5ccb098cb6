#!/usr/bin/env python3
"""Warm-pool figures (docs/pool.md). Usage: bench-serve.py SANDBOX_BINARY [RUNS] [SEQUENTIAL]

Starts `sandbox serve --pool 2` on a private socket, waits for a full pool, then times from
the client side (the `sandbox run` process: connect, request, execution, done) RUNS runs of
`console.log(1)` and of `print(1)`, each with the pool full again first (median, p95); then
SEQUENTIAL back-to-back requests with the pool refilling meanwhile: executions per minute.
Also the PSS of the idle pool (QEMU and bridge of each pooled VM, from smaps_rollup).
Stops serve with SIGTERM. Not part of the test suites (it takes a minute or two)."""
import os
import signal
import socket
import statistics
import struct
import json
import subprocess
import sys
import tempfile
import time

SANDBOX = sys.argv[1]
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SEQ = int(sys.argv[3]) if len(sys.argv) > 3 else 20


def status(sock):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock)
        m = b'{"type":"status"}'
        s.sendall(struct.pack(">I", len(m)) + m)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            buf += s.recv(65536)
        return json.loads(buf[4:])


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


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
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


def one(env, lang, code):
    t = time.monotonic()
    p = subprocess.run([SANDBOX, "run", "--lang", lang, "--json", "-"], input=code.encode(),
                       capture_output=True, env=env, timeout=120)
    ms = (time.monotonic() - t) * 1000
    rep = json.loads(p.stdout)
    assert rep["status"] == "ok" and rep["start"] == "pool", p.stdout
    return ms, rep["duration_ms"], rep["claim_ms"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
    sock = os.path.join(tmp, "s", "sandbox.sock")
    env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock)
    serve = subprocess.Popen([SANDBOX, "serve", "--socket", sock, "--pool", "2"], env=env,
                             stderr=subprocess.DEVNULL)
    try:
        wait_full(sock)
        time.sleep(1)
        kids = children(serve.pid)
        total = sum(pss_kib(k) for k in kids)
        print(f"PSS of the idle pool: {len(kids)} processes (QEMU + bridge per VM), "
              f"{total / 1024:.0f} MiB, {total / 1024 / 2:.0f} MiB per pooled VM")
        for lang, code in [("javascript", "console.log(1)"), ("python", "print(1)")]:
            walls, execs, claims = [], [], []
            for _ in range(RUNS):
                wait_full(sock)
                w, d, c = one(env, lang, code)
                walls.append(w)
                execs.append(d)
                claims.append(c)
            print(f"{lang}: client wall median {statistics.median(walls):.0f} ms, p95 "
                  f"{pct(walls, 0.95):.0f} ms; execution (duration_ms) median "
                  f"{statistics.median(execs):.0f} ms; claim median "
                  f"{statistics.median(claims):.0f} ms ({RUNS} runs)")
        wait_full(sock)
        t = time.monotonic()
        for i in range(SEQ):
            one(env, "javascript" if i % 2 == 0 else "python",
                "console.log(1)" if i % 2 == 0 else "print(1)")
        el = time.monotonic() - t
        print(f"{SEQ} sequential requests (JS/Python alternating, pool refilling): {el:.1f} s, "
              f"{SEQ * 60 / el:.1f} executions per minute")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
