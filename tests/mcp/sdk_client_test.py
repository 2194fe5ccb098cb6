#!/usr/bin/env python3
"""`sandbox mcp` driven by the official MCP TypeScript SDK's Client (sdk_client_test.mjs), with
real VMs: the SDK's StdioClientTransport spawns the server; tools listed, execute in JavaScript,
TypeScript and Python, errors, a timeout, and a cancellation that ends the execution.

Usage: sdk_client_test.py SANDBOX_BINARY TEST
       (TEST: tools | execute | making | cancel | discovery | serve | sessions |
              sessions_local | approvals | approvals_serve)

The making test gives `sandbox mcp --no-serve` an empty snapshot cache of its own (in the
test's state dir): its first execute makes the snapshot, one sent meanwhile is answered after.

The approvals test gives `sandbox mcp --tools --no-serve` a catalog whose policy holds calc.add
for approval, asked of the SDK client (elicitation), and checks the record of the execution it
approved (`sandbox records show`: answered by "the MCP client sdk-client-test");
approvals_serve the same through the test's `sandbox serve` (answered through its socket: "a
client of sandbox serve, pid N", checked once the server stopped).
The discovery test gives `sandbox mcp --tools` a catalog (written into the runtime dir) of the
integration tests' calc command and @modelcontextprotocol/server-everything (.deps/mcp-servers,
tests/mcp/fetch-servers).

The serve and sessions tests start `sandbox serve --pool 1` in the same runtime dir first, so
that `sandbox mcp` sends its executions (and sessions) there; that server is stopped by its PID
(SIGTERM) at the end.

Reuses tests/integration/run_test.py's Sandbox: node and everything it starts run with a private
runtime dir (XDG_RUNTIME_DIR, TMPDIR), so no `sandbox serve` of the developer's answers and the
VMs restored by `sandbox mcp` carry that dir in their command lines; afterwards nothing may be
left running or in it. The node process (and for the serve test, the server) are the only ones
this test starts, and they are waited for.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
from run_test import Failure, Sandbox  # noqa: E402

SDK = os.path.join(TOP, ".deps", "mcp-sdk", "node_modules", "@modelcontextprotocol", "sdk")
SCRIPT = os.path.join(HERE, "sdk_client_test.mjs")
TESTS = ("tools", "execute", "making", "cancel", "discovery", "serve", "sessions", "sessions_local",
         "approvals", "approvals_serve")
EVERYTHING = os.path.join(TOP, ".deps", "mcp-servers", "node_modules", "@modelcontextprotocol",
                          "server-everything", "dist", "index.js")
# `sandbox serve` (the serve test's) gets this long to make its socket, and to exit on SIGTERM.
SERVE_START_S = 120
SERVE_STOP_S = 60
# Each test's VMs (restored under TCG) and the SDK's own waits fit well within this.
NODE_TIMEOUT_S = 400


def environment(sbx):
    # A records database of the test's own: `sandbox serve` holds its database alone, and the
    # serve and sessions tests each start one, maybe at the same time.
    env = dict(os.environ, XDG_RUNTIME_DIR=sbx.runtime, TMPDIR=sbx.runtime,
               SBX_TEST_RUNTIME=sbx.runtime, SANDBOX_STATE_DIR=sbx.state_dir,
               SBX_TEST_SERVE_SOCKET=os.path.join(sbx.runtime, "sandbox", "sandbox.sock"))
    env.setdefault("SANDBOX_ACCEL", "tcg")
    env.pop("SANDBOX_SERVE_SOCKET", None)  # a server of the developer's is not this test's
    if getattr(sbx, "snapshots", None) is not None:
        env["SANDBOX_SNAPSHOT_DIR"] = env["SBX_TEST_SNAPSHOTS"] = sbx.snapshots
    return env


def start_serve(sbx):
    """`sandbox serve --pool 1` in the runtime dir; returned once its socket exists."""
    env = environment(sbx)
    proc = subprocess.Popen([sbx.binary, "serve", "--pool", "1"], cwd=TOP, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + SERVE_START_S
    while not os.path.exists(env["SBX_TEST_SERVE_SOCKET"]):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_serve(proc)
            raise Failure(f"sandbox serve did not start (exit {proc.returncode})")
        time.sleep(0.1)
    return proc


def stop_serve(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # our own child, by its PID
    try:
        rc = proc.wait(timeout=SERVE_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise Failure(f"sandbox serve did not exit within {SERVE_STOP_S} s of SIGTERM")
    if rc != 0:
        raise Failure(f"sandbox serve exited {rc} on SIGTERM")


def write_catalog(sbx):
    path = os.path.join(sbx.runtime, "tools.json")
    with open(path, "w") as f:
        json.dump({"providers": {
            "calc": {"kind": "command",
                     "command": [os.path.join(TOP, "tests", "integration", "calc-tool")],
                     "tools": {"add": {"description": "Add two numbers."},
                               "fail": {"description": "Always fails."}}},
            "everything": {"kind": "mcp", "command": ["node", EVERYTHING, "stdio"]},
        }}, f)
    return path


def write_approvals_catalog(sbx):
    path = os.path.join(sbx.runtime, "tools.json")
    with open(path, "w") as f:
        json.dump({"providers": {
            "calc": {"kind": "command",
                     "command": [os.path.join(TOP, "tests", "integration", "calc-tool")],
                     "tools": {"add": {"description": "Add two numbers."}}}},
            "policy": {"rules": [{"match": "calc.add", "action": "approve"}],
                       "approval_timeout_ms": 60000}}, f)
    return path


def check_answered_by(sbx, env, text, by):
    """The record of the execution the client approved says @by answered (a prefix)."""
    ids = [line.split()[1] for line in text.splitlines() if line.startswith("APPROVED_BY_CLIENT ")]
    if len(ids) != 1:
        raise Failure("the SDK client did not say which execution it approved", text[-2000:])
    out = subprocess.run([sbx.binary, "records", "show", ids[0], "--json"], env=env,
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise Failure(f"records show {ids[0]}", out.stderr)
    approvals = json.loads(out.stdout).get("approvals", [])
    if [a.get("decision") for a in approvals] != ["approved"] or \
            not (approvals[0].get("answered_by") or "").startswith(by):
        raise Failure("the record does not say the MCP client approved", approvals)


def run(sbx, test):
    """The node test's output."""
    env = environment(sbx)
    if test not in ("discovery", "approvals", "approvals_serve"):
        return run_node(sbx, test, env)
    env["SBX_TEST_CATALOG"] = (write_catalog if test == "discovery"
                               else write_approvals_catalog)(sbx)
    try:
        return run_node(sbx, test, env)
    finally:
        os.unlink(env["SBX_TEST_CATALOG"])  # ours; anything else left in the dir is a leak


def run_node(sbx, test, env):
    proc = subprocess.Popen(["node", SCRIPT, sbx.binary, test], cwd=TOP, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=NODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its PID; what it left is found by sbx.close()
        out, _ = proc.communicate()
        raise Failure(f"the SDK client did not finish in {NODE_TIMEOUT_S} s", out.decode()[-4000:])
    text = out.decode(errors="replace")
    if proc.returncode != 0 or "PASS" not in text.splitlines():
        raise Failure(f"the SDK client failed (exit {proc.returncode})", text[-6000:])
    return text


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in TESTS:
        print(f"usage: {sys.argv[0]} SANDBOX {{{'|'.join(TESTS)}}}", file=sys.stderr)
        return 2
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    if sys.argv[2] == "discovery" and not os.path.exists(EVERYTHING):
        print("FAIL: no MCP test servers in .deps/mcp-servers (run tests/mcp/fetch-servers)")
        return 1
    if not os.path.exists(os.path.join(SDK, "package.json")):
        print("FAIL: no MCP SDK in .deps/mcp-sdk (run tests/mcp/fetch-sdk)")
        return 1
    sbx = Sandbox(sys.argv[1])
    sbx.state_dir = tempfile.mkdtemp(prefix="sbx-sdk-state-")
    # o+x, so that the VMs' jail (another uid) reaches it and their runtime dirs are made in it,
    # not in /tmp (vm/vm-start.c): their QEMUs then name it, which the cancel test and the leak
    # check go by.
    os.chmod(sbx.runtime, 0o711)
    if sys.argv[2] == "making":  # a snapshot cache of its own, empty: the test makes it
        sbx.snapshots = os.path.join(sbx.state_dir, "snapshots")
        os.mkdir(sbx.snapshots, 0o700)
    failure = None
    serve = None
    try:
        if sys.argv[2] in ("serve", "sessions", "approvals_serve"):
            serve = start_serve(sbx)
        text = run(sbx, sys.argv[2])
    except Failure as e:
        failure = e
    finally:
        if serve is not None:
            try:
                stop_serve(serve)
            except Failure as e:
                failure = failure or e
        # the records, once no server holds the database
        if failure is None and sys.argv[2].startswith("approvals"):
            try:
                check_answered_by(sbx, environment(sbx), text,
                                  "the MCP client sdk-client-test" if sys.argv[2] == "approvals"
                                  else "a client of sandbox serve, pid ")
            except Failure as e:
                failure = e
        try:
            sbx.close()
        except Failure as e:
            failure = failure or e
        shutil.rmtree(sbx.state_dir, ignore_errors=True)
    if failure:
        print(f"FAIL: {failure}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
