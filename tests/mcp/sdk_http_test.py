#!/usr/bin/env python3
"""`/mcp` of `sandbox serve --listen` (MCP over streamable HTTP) driven by the official MCP
TypeScript SDK's Client (sdk_http_test.mjs), with real VMs.

Usage: sdk_http_test.py SANDBOX_BINARY [SECTION]

Starts the server on 127.0.0.1 (a free port) with a store, socket and runtime dir of its own
(tests/service/api.py's Server), a catalogs dir holding "tools" (the integration tests' calc
command and @modelcontextprotocol/server-everything from .deps/mcp-servers) and "approvals"
(calc.add held for a person's approval), and two tenants: alice may name both catalogs (and
asks for at most 120 s), bob may not. The record of the execution the client approved must say
the MCP client answered (`sandbox records show`). The node process and the
server are the only processes this test starts; both are waited for, and afterwards none of the
server's children or VMs may be left.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "service"))
import api  # noqa: E402

SDK = os.path.join(TOP, ".deps", "mcp-sdk", "node_modules", "@modelcontextprotocol", "sdk")
SCRIPT = os.path.join(HERE, "sdk_http_test.mjs")
EVERYTHING = os.path.join(TOP, ".deps", "mcp-servers", "node_modules", "@modelcontextprotocol",
                          "server-everything", "dist", "index.js")
# The sections' VMs (restored under TCG) and the SDK's own waits fit well within this.
NODE_TIMEOUT_S = 400


def write_catalog(tmp):
    d = os.path.join(tmp, "catalogs")
    os.makedirs(d)
    with open(os.path.join(d, "tools.json"), "w") as f:
        json.dump({"providers": {
            "calc": {"kind": "command",
                     "command": [os.path.join(TOP, "tests", "integration", "calc-tool")],
                     "tools": {"add": {"description": "Add two numbers."}}},
            "everything": {"kind": "mcp", "command": ["node", EVERYTHING, "stdio"]},
        }}, f)
    # calc.add held for a person's approval (the approvals section: answered by the client)
    with open(os.path.join(d, "approvals.json"), "w") as f:
        json.dump({"providers": {
            "calc": {"kind": "command",
                     "command": [os.path.join(TOP, "tests", "integration", "calc-tool")],
                     "tools": {"add": {"description": "Add two numbers."}}}},
            "policy": {"rules": [{"match": "calc.add", "action": "approve"}],
                       "approval_timeout_ms": 60000}}, f)
    return d


def check_answered_by(sandbox, srv, text):
    """The record of the execution the client approved says who answered: the MCP client."""
    ids = [line.split()[1] for line in text.splitlines() if line.startswith("APPROVED_BY_CLIENT ")]
    for ex_id in ids:
        out = subprocess.run([sandbox, "records", "show", ex_id, "--json", "--db", srv.db],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            return f"records show {ex_id}: {out.stderr}"
        approvals = json.loads(out.stdout).get("approvals", [])
        if [(a.get("decision"), a.get("answered_by")) for a in approvals] != \
                [("approved", "the MCP client sdk-http-test")]:
            return f"the record of {ex_id} does not say the client approved: {approvals}"
    return None


def run_node(srv, keys, section):
    env = dict(os.environ, SBX_TEST_URL=srv.base, SBX_TEST_KEY_A=keys[0], SBX_TEST_KEY_B=keys[1],
               SBX_TEST_SERVE_SOCKET=srv.sock)
    args = ["node", SCRIPT] + ([section] if section else [])
    proc = subprocess.Popen(args, cwd=TOP, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=NODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its PID
        out, _ = proc.communicate()
        return f"the SDK client did not finish in {NODE_TIMEOUT_S} s:\n{out.decode()[-4000:]}"
    text = out.decode(errors="replace")
    print(text)
    if proc.returncode != 0 or "PASS" not in text.splitlines():
        return f"the SDK client failed (exit {proc.returncode})"
    srv.node_output = text
    return None


def main():
    if len(sys.argv) not in (2, 3):
        print(f"usage: {sys.argv[0]} SANDBOX [SECTION]", file=sys.stderr)
        return 2
    sandbox = sys.argv[1]
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    for what, path in (("MCP SDK", SDK), ("MCP test servers", EVERYTHING)):
        if not os.path.exists(path):
            print(f"FAIL: no {what} in .deps (run scripts/setup)")
            return 1
    section = sys.argv[2] if len(sys.argv) == 3 else None
    tenants = [("alice", "--catalog", "tools", "--catalog", "approvals", "--max-concurrent", "4",
                "--max-timeout", "120"), ("bob",)]

    def body(srv, keys, tmp):
        return (run_node(srv, keys, section) or
                check_answered_by(sandbox, srv, srv.node_output) or
                (None if section else records(sandbox, srv)))

    return api.run_with_server(sandbox, "sdk-http-", tenants, body, catalogs=write_catalog)


def records(sandbox, srv):
    """The executions of /mcp are recorded as the API's are, with front end "mcp" (None: so)."""
    p = subprocess.run([sandbox, "records", "list", "--db", srv.db, "--tenant", "alice", "--json",
                        "--limit", "100"], capture_output=True, timeout=60)
    try:
        recs = json.loads(p.stdout)
    except ValueError:
        return f"sandbox records list: exit {p.returncode}: {p.stderr.decode()[-2000:]}"
    mcp = [r for r in recs if r["front_end"] == "mcp"]
    if len(mcp) < 8 or not any(r["session_id"] for r in mcp) or \
            not any(r["catalog"] == "tools" for r in mcp):
        return f"the records of /mcp's executions: {json.dumps(recs)[:3000]}"
    print(f"ok: {len(mcp)} executions of /mcp recorded (front end mcp, sessions, the catalog)")
    return None


if __name__ == "__main__":
    sys.exit(main())
