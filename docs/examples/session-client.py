#!/usr/bin/env python3
"""A session over the sandbox's HTTP API (docs/sessions.md), as README.md shows it: state built
up over several executions, a file put in and a result file taken out, a function called by
name, and a one-shot execution that takes a file and returns the one it wrote.

  SANDBOX_API=http://127.0.0.1:8080 SANDBOX_KEY=sbx_... python3 docs/examples/session-client.py

Needs python3-requests. tests/service/test-sessions.py runs it against a real server."""
import base64
import hashlib
import os
import sys

import requests

API = os.environ.get("SANDBOX_API", "http://127.0.0.1:8080") + "/v1"
s = requests.Session()
s.headers["Authorization"] = "Bearer " + os.environ["SANDBOX_KEY"]


def run(sid, **body):
    """One execution in the session, waited for; its object."""
    r = s.post(f"{API}/sessions/{sid}/executions", params={"wait": 120}, json=body, timeout=150)
    r.raise_for_status()
    ex = r.json()
    print(ex["status"], "result", ex["result"], "stdout", repr(ex["stdout"]))
    return ex


# A session: one VM kept for this client (201 once it is ready).
r = s.post(f"{API}/sessions", json={"idle_timeout_s": 120}, timeout=120)
r.raise_for_status()
sid = r.json()["id"]
print("session", sid)
try:
    run(sid, language="python", code="import statistics\nseen = []\n"
        "def add(v):\n    seen.append(v)\n    return statistics.mean(seen)")
    run(sid, language="python", code="", entry="add", args=[4])
    mean = run(sid, language="python", code="", entry="add", args=[8])["result"]

    # A file in, a program that reads it and writes another, the other out.
    data = "\n".join(str(i) for i in range(100)).encode()
    put = s.put(f"{API}/sessions/{sid}/files/in/numbers.txt", data=data, timeout=60).json()
    print("put", put["path"], put["size"], "bytes")
    run(sid, language="python", code="import os\nos.makedirs('out', exist_ok=True)\n"
        "total = sum(int(x) for x in open('in/numbers.txt'))\n"
        "open('out/total.txt', 'w').write(str(total))\ntotal")
    got = s.get(f"{API}/sessions/{sid}/files/out/total.txt", timeout=60)
    ok_digest = got.headers["X-Sandbox-Sha256"] == hashlib.sha256(got.content).hexdigest()
    print("got out/total.txt", got.content.decode(), "digest ok" if ok_digest else "DIGEST BAD")
    listing = s.get(f"{API}/sessions/{sid}/files", timeout=60).json()
    print("workspace", sorted(e["path"] for e in listing["entries"] if e["type"] == "file"))
finally:
    s.delete(f"{API}/sessions/{sid}", timeout=60)  # its VM is killed

# One-shot: a file given, the file it wrote returned.
r = s.post(f"{API}/executions", params={"wait": 120}, timeout=150, json={
    "language": "javascript",
    "code": "const fs = require('fs');\n"
            "fs.writeFileSync('upper.txt', fs.readFileSync('in.txt', 'utf8').toUpperCase())",
    "files": [{"path": "in.txt", "content": "shout"}]})
r.raise_for_status()
changed = r.json()["files"]["changed"]
upper = base64.b64decode(changed[0]["content_base64"]).decode() if changed else None
print("one-shot wrote", [f["path"] for f in changed], repr(upper))
sys.exit(0 if mean == 6 and got.content == b"4950" and ok_digest and upper == "SHOUT" else 1)
