#!/usr/bin/env python3
"""The client command the MCP conformance suite runs for its client scenarios: it exercises the
host's own MCP client (host-agent/tools/mcp*.c) through `sandbox run`, in a real VM.

Usage (by the suite, which appends the URL of the scenario's server and sets
MCP_CONFORMANCE_SCENARIO): conformance_client.py SANDBOX_BINARY URL

It writes a catalog with one MCP provider `s` of transport streamable HTTP at URL, then runs a
JavaScript guest program with it that calls every tool the server listed (the host agent's client
initializes, lists the tools and makes the calls; the guest sees the tools as `tools.s.*`). The
program's result and the report go to stdout; the exit status is sandbox run's, so 0 means the
client got through: initialized, listed, every call answered (a tool's own error included).

The runtime dir is the caller's (XDG_RUNTIME_DIR: the test's private one); the catalog lives in a
temp dir removed at the end. sandbox run gets a deadline below the suite's own timeout, so it ends
(and cleans up) before the suite would kill this process.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# Arguments for the tools that need some (the tools_call scenario's add_numbers); other tools are
# called with {}.
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}

# Each call's result, or its error as text: a tool error is an answer the client got, not a
# failure of the client.
PROGRAM = r"""
const args = %s;
const out = {};
for (const name of Object.keys(tools.s ?? {})) {
    try {
        out[name] = await tools.s[name](args[name] ?? {});
    } catch (e) {
        out[name] = {error: String(e)};
    }
}
out
"""

# Seconds sandbox run may take: below client_conformance_test.py's --timeout for the suite (a
# VM restored under TCG on a busy 2-core machine takes a few seconds; the sse-retry scenario
# waits its 500 ms retry).
RUN_TIMEOUT_S = 100


def main():
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} SANDBOX_BINARY URL", file=sys.stderr)
        return 2
    binary, url = sys.argv[1], sys.argv[2]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    tmp = tempfile.mkdtemp(prefix="sbx-conf-client-")
    try:
        catalog = os.path.join(tmp, "tools.json")
        with open(catalog, "w") as f:
            json.dump({"providers": {"s": {"kind": "mcp", "url": url, "timeout_ms": 30000}}}, f)
        env = dict(os.environ)
        env.setdefault("SANDBOX_ACCEL", "tcg")
        argv = [binary, "run", "--lang", "javascript", "--json", "--timeout", "60",
                "--tools", catalog, "-"]
        print(f"conformance_client: scenario {scenario}, {url}", file=sys.stderr)
        try:
            proc = subprocess.run(argv, input=(PROGRAM % json.dumps(ARGUMENTS)).encode(),
                                  capture_output=True, env=env, timeout=RUN_TIMEOUT_S,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"conformance_client: sandbox run did not end in {RUN_TIMEOUT_S} s",
                  file=sys.stderr)
            return 1
        sys.stdout.write(proc.stdout.decode(errors="replace"))
        sys.stderr.write(proc.stderr.decode(errors="replace"))
        return proc.returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
