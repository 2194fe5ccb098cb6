#!/usr/bin/env python3
"""`/mcp` of `sandbox serve --listen` (MCP over streamable HTTP) driven by the official MCP
TypeScript SDK's Client (sdk_http_test.mjs), with real VMs.

Usage: sdk_http_test.py SANDBOX_BINARY [SECTION]

Starts the server on 127.0.0.1 (a free port) with a store, socket and runtime dir of its own
(tests/service/api.py's Server), a catalogs dir holding "tools" (the integration tests' calc
command and @modelcontextprotocol/server-everything from .deps/mcp-servers), and two tenants:
alice may name that catalog (and asks for at most 120 s), bob may not. The node process and the
server are the only processes this test starts; both are waited for, and afterwards none of the
server's children or VMs may be left.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

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


def check_answered_by(sandbox, db, text):
    """The record of the execution the client approved says who answered: the MCP client."""
    ids = [line.split()[1] for line in text.splitlines() if line.startswith("APPROVED_BY_CLIENT ")]
    for ex_id in ids:
        out = subprocess.run([sandbox, "records", "show", ex_id, "--json", "--db", db],
                             capture_output=True, text=True, timeout=30)
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
    tmp = tempfile.mkdtemp(prefix="sdk-http-")
    os.chmod(tmp, 0o711)  # the VMs' jail (another uid) reaches the runtime dirs in it
    srv = None
    failure = None
    try:
        db = os.path.join(tmp, "state", "sandbox.db")
        keys = (api.tenant(sandbox, db, "add", "alice", "--catalog", "tools",
                           "--catalog", "approvals", "--max-concurrent", "4",
                           "--max-timeout", "120"),
                api.tenant(sandbox, db, "add", "bob"))
        srv = api.Server(sandbox, tmp, db, pool=1, catalogs_dir=write_catalog(tmp))
        failure = srv.start()
        if failure is None:
            failure = run_node(srv, keys, sys.argv[2] if len(sys.argv) == 3 else None)
    finally:
        if srv is not None:
            rc = srv.stop()
            left = srv.leftovers()
            if rc != 0 and failure is None:
                failure = f"sandbox serve exited {rc} on SIGTERM:\n{srv.log()}"
            if left and failure is None:
                failure = f"left running after the server stopped: {left}"
            if failure is None:
                failure = check_answered_by(sandbox, db, getattr(srv, "node_output", ""))
            if failure is not None:
                print(srv.log())
        shutil.rmtree(tmp, ignore_errors=True)
    if failure:
        print(f"FAIL: {failure}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
