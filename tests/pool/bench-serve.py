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
import statistics
import subprocess
import sys
import tempfile
import time

import bench_serve_lib as lib

SANDBOX = sys.argv[1]
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SEQ = int(sys.argv[3]) if len(sys.argv) > 3 else 20

with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
    sock = os.path.join(tmp, "s", "sandbox.sock")
    env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock)
    serve = subprocess.Popen([SANDBOX, "serve", "--socket", sock, "--pool", "2"], env=env,
                             stderr=subprocess.DEVNULL)
    try:
        lib.wait_full(sock)
        time.sleep(1)
        kids = lib.children(serve.pid)
        total = sum(lib.pss_kib(k) for k in kids)
        print(f"PSS of the idle pool: {len(kids)} processes (QEMU + bridge per VM), "
              f"{total / 1024:.0f} MiB, {total / 1024 / 2:.0f} MiB per pooled VM")
        for lang, code in [("javascript", "console.log(1)"), ("python", "print(1)")]:
            walls, execs, claims = [], [], []
            for _ in range(RUNS):
                lib.wait_full(sock)
                w, d, c = lib.one(SANDBOX, env, lang, code)
                walls.append(w)
                execs.append(d)
                claims.append(c)
            print(f"{lang}: client wall median {statistics.median(walls):.0f} ms, p95 "
                  f"{lib.pct(walls, 0.95):.0f} ms; execution (duration_ms) median "
                  f"{statistics.median(execs):.0f} ms; claim median "
                  f"{statistics.median(claims):.0f} ms ({RUNS} runs)")
        lib.wait_full(sock)
        t = time.monotonic()
        for i in range(SEQ):
            lib.one(SANDBOX, env, "javascript" if i % 2 == 0 else "python",
                "console.log(1)" if i % 2 == 0 else "print(1)")
        el = time.monotonic() - t
        print(f"{SEQ} sequential requests (JS/Python alternating, pool refilling): {el:.1f} s, "
              f"{SEQ * 60 / el:.1f} executions per minute")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
