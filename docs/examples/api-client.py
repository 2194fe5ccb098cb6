#!/usr/bin/env python3
"""A client of the sandbox's HTTP API (docs/api.md), as README.md shows it: runs a JavaScript
program, follows its events live (NDJSON), then fetches the execution and lists the latest.

  SANDBOX_API=http://127.0.0.1:8080 SANDBOX_KEY=sbx_... python3 docs/examples/api-client.py

Needs python3-requests. tests/service/test-http-api.py runs it against a real server."""
import json
import os
import sys

import requests

API = os.environ.get("SANDBOX_API", "http://127.0.0.1:8080")
s = requests.Session()
s.headers["Authorization"] = "Bearer " + os.environ["SANDBOX_KEY"]

# Create it (201 at once; add ?wait=60 to get the answer when it ends instead).
r = s.post(f"{API}/v1/executions", timeout=30,
           json={"language": "javascript",
                 "code": "for (let i = 0; i < 3; i++) console.log(i); 6 * 7"})
if r.status_code == 429:
    sys.exit(f"over a quota: retry in {r.headers.get('Retry-After')} s")
r.raise_for_status()
ex = r.json()
print("created", ex["id"], ex["status"])

# Its events, from the start, live: output as it comes, then done with the whole execution.
with s.get(f"{API}/v1/executions/{ex['id']}/events", stream=True, timeout=120,
           headers={"Accept": "application/x-ndjson"}) as events:
    for line in events.iter_lines():
        ev = json.loads(line)
        if ev["event"] == "output":
            print(ev["data"]["stream"], repr(ev["data"]["data"]))
        elif ev["event"] == "done":
            print("done", ev["data"]["status"], "result", ev["data"]["result"])

ex = s.get(f"{API}/v1/executions/{ex['id']}", timeout=30).json()
print("fetched", ex["status"], "stdout", repr(ex["stdout"]), "result", ex["result"])
page = s.get(f"{API}/v1/executions", params={"limit": 5}, timeout=30).json()
print("latest", [e["id"] for e in page["executions"]])
sys.exit(0 if ex["status"] == "ok" and ex["result"] == 42 else 1)
