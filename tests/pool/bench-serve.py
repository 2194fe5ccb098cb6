#!/usr/bin/env python3
"""Warm-pool figures (docs/pool.md). Usage: bench-serve.py SANDBOX_BINARY [RUNS] [SEQUENTIAL]

Starts `sandbox serve --pool 2` on a private socket, waits for a full pool, then times RUNS runs
of `console.log(1)` and of `print(1)`, each with the pool full again first: from the claim to
`done` (serve's clock: VM in hand to the done frame) and the client wall (the `sandbox run`
process: connect, request, execution, done), median and p95; the same with `--no-warm-up`;
then SEQUENTIAL back-to-back requests with the pool refilling meanwhile: executions per minute.
Also the PSS of the idle pool, and the claim of an on-demand restore (`--pool 0`) with and
without a pre-started QEMU. Stops each serve with SIGTERM. Not part of the test suites."""
import os
import sys
import tempfile
import time

import bench_serve_lib as lib

SANDBOX = sys.argv[1]
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SEQ = int(sys.argv[3]) if len(sys.argv) > 3 else 20
CODES = [("javascript", "console.log(1)"), ("python", "print(1)")]

with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
    sock = os.path.join(tmp, "s", "sandbox.sock")
    env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock)
    for mode, args in [("warm-up", []), ("no warm-up", ["--no-warm-up"])]:
        serve = lib.start_serve(SANDBOX, sock, "--pool", "2", *args)
        try:
            lib.wait_full(sock)
            if mode == "warm-up":
                time.sleep(1)
                kids = [k for top in lib.children(serve.pid) for k in [top] + lib.descendants(top)]
                total = sum(lib.pss_kib(k) for k in kids)
                print(f"PSS of the idle pool and the pre-started QEMU: {len(kids)} processes, "
                      f"{total / 1024:.0f} MiB")
            for lang, code in CODES:
                walls, reps = lib.pool_runs(SANDBOX, sock, lang, code, RUNS)
                print(f"{code} ({mode}): claim to done "
                      f"{lib.summary([lib.claim_to_done(r) for r in reps])}; client wall "
                      f"{lib.summary(walls)} ({RUNS} runs)", flush=True)
            if mode == "warm-up" and SEQ > 0:
                lib.wait_full(sock)
                t = time.monotonic()
                for i in range(SEQ):
                    lib.one(SANDBOX, env, *CODES[i % 2])
                el = time.monotonic() - t
                print(f"{SEQ} sequential requests (JS/Python alternating, pool refilling): "
                      f"{el:.1f} s, {SEQ * 60 / el:.1f} executions per minute")
        finally:
            lib.stop_serve(serve)
    for pre in ("1", "0"):
        serve = lib.start_serve(SANDBOX, sock, "--pool", "0", "--prestart", pre)
        try:
            lib.wait_full(sock, 0)  # the server answers
            claims = []
            for _ in range(RUNS):
                lib.wait_prestarted(sock, int(pre))
                time.sleep(0.5)
                claims.append(lib.one_report(SANDBOX, env, *CODES[1])[1]["claim_ms"])
            print(f"on-demand restore (--pool 0 --prestart {pre}): claim {lib.summary(claims)}")
        finally:
            lib.stop_serve(serve)
