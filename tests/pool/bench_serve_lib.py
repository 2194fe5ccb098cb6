"""Helpers to drive a `sandbox serve` from outside: its status request, waiting for a full pool,
PSS of its VMs, one timed `sandbox run` through it. Used by bench-serve.py and scripts/bench."""
import json
import os
import socket
import struct
import subprocess
import time


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

