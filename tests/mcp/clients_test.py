#!/usr/bin/env python3
"""The sandbox's MCP server against MCP clients no one here wrote, installed pinned from npm
(.deps/mcp-clients, tests/mcp/fetch-clients), with real VMs:

- the official MCP Inspector's CLI (`mcp-inspector --cli`) lists the tools and calls `execute`
  over HTTP (`/mcp` of `sandbox serve --listen`, the tenant's key in a header) and over stdio
  (`sandbox mcp`, whose executions go to the same server's pool);
- the official conformance suite (`@modelcontextprotocol/conformance server`, suite "all")
  against `/mcp`, through a proxy that adds the tenant's key (the suite sends none; key_proxy.py):
  every scenario passes except those listed in conformance-server-expected.yml, which do not
  apply to a tools-only server (docs/mcp-server.md, "Conformance"); a listed one that passes
  fails the test too.

Usage: clients_test.py SANDBOX_BINARY

The server, the Inspector's and the suite's node processes are the only processes this test
starts, each tracked by PID and waited for; afterwards none of the server's children or VMs may
be left.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "service"))
sys.path.insert(0, HERE)
import api  # noqa: E402
from key_proxy import KeyProxy  # noqa: E402

CLIENTS = os.path.join(TOP, ".deps", "mcp-clients", "node_modules", ".bin")
EXPECTED = os.path.join(HERE, "conformance-server-expected.yml")
TOOLS = ["execute", "session_open", "session_close", "file_write", "file_read"]
# One Inspector call restores or claims a VM and runs a line of code under TCG.
INSPECTOR_TIMEOUT_S = 180
# The suite's 33 scenarios, each a connection or two; the server answers them at once.
SUITE_TIMEOUT_S = 600


class Failed(Exception):
    pass


def run(args, env, cwd, timeout):
    """Run @args (a node program of .deps/mcp-clients); its exit code and output."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its PID
        out, _ = proc.communicate()
        raise Failed(f"{args[0]} did not finish in {timeout} s:\n{out.decode()[-4000:]}")
    return proc.returncode, out.decode(errors="replace")


def check(cond, what, detail=""):
    print(("ok: " if cond else "FAILED: ") + what)
    if not cond:
        raise Failed(f"{what}\n{detail[-4000:]}")


def inspector_json(args, env, cwd, tool_error=False):
    """The JSON the Inspector printed; it exits 0, or non-zero for a @tool_error result."""
    rc, out = run([os.path.join(CLIENTS, "mcp-inspector"), "--cli", *args], env, cwd,
                  INSPECTOR_TIMEOUT_S)
    check((rc != 0) == tool_error,
          f"mcp-inspector --cli {' '.join(args[:2])} ... {args[-1]} exits "
          f"{'non-zero (a tool error)' if tool_error else '0'}", out)
    try:
        return json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
    except ValueError:
        raise Failed(f"the Inspector printed no JSON:\n{out[-4000:]}")


def execute_args(language, code):
    return ["--method", "tools/call", "--tool-name", "execute", "--tool-arg",
            f"language={language}", "--tool-arg", f"code={code}"]


def inspector(srv, key, sandbox, env, cwd):
    url = srv.base + "/mcp"
    http = [url, "--transport", "http", "--header", f"Authorization: Bearer {key}"]
    listed = inspector_json(http + ["--method", "tools/list"], env, cwd)
    check([t["name"] for t in listed.get("tools", [])] == TOOLS,
          "HTTP: the Inspector lists the tools", json.dumps(listed)[:2000])
    r = inspector_json(http + execute_args("javascript", "console.log(6*7); 40+2"), env, cwd)
    sc = r.get("structuredContent", {})
    check(sc.get("result") == 42 and sc.get("stdout") == "42\n" and r.get("isError") is False,
          "HTTP: the Inspector's execute of JavaScript", json.dumps(r)[:2000])
    r = inspector_json(http + execute_args("python", "raise ValueError('no')"), env, cwd,
                       tool_error=True)
    check(r.get("isError") is True and
          r.get("structuredContent", {}).get("error", {}).get("type") == "ValueError",
          "HTTP: a program that raises is a tool error", json.dumps(r)[:2000])
    # stdio: `sandbox mcp` as the Inspector spawns it, sending its execution to the server.
    # The Inspector passes a spawned server only a few variables of its own: the rest by -e.
    passed = [a for k in ("SANDBOX_SERVE_SOCKET", "XDG_RUNTIME_DIR", "TMPDIR", "SANDBOX_ACCEL",
                          "SANDBOX_IMAGE_DIR") if k in env for a in ("-e", f"{k}={env[k]}")]
    stdio = [*passed, os.path.abspath(sandbox), "mcp"]
    listed = inspector_json(stdio + ["--method", "tools/list"], env, cwd)
    check([t["name"] for t in listed.get("tools", [])] == TOOLS,
          "stdio: the Inspector lists the tools", json.dumps(listed)[:2000])
    before = srv.status()["claimed_total"]
    r = inspector_json(stdio + execute_args("python", "print(sum(range(10)))"), env, cwd)
    check(r.get("structuredContent", {}).get("stdout") == "45\n",
          "stdio: the Inspector's execute of Python", json.dumps(r)[:2000])
    check(srv.status()["claimed_total"] == before + 1, "stdio: it ran on the server's pool")


def print_failures(results):
    """The failed checks the suite saved, with their details (its summary names only them)."""
    for root, _, files in os.walk(results):
        if "checks.json" not in files:
            continue
        try:
            with open(os.path.join(root, "checks.json")) as f:
                checks = json.load(f)
        except (OSError, ValueError):
            continue
        for c in checks:
            if c.get("status") == "FAILURE":
                print(os.path.basename(root), json.dumps(c)[:1500])


def conformance(srv, key, env, cwd):
    proxy = KeyProxy(srv.port, key)
    try:
        rc, out = run([os.path.join(CLIENTS, "conformance"), "server", "--url",
                       f"http://localhost:{proxy.port}/mcp", "--suite", "all",
                       "--expected-failures", EXPECTED,
                       "-o", os.path.join(cwd, "results")], env, cwd, SUITE_TIMEOUT_S)
    finally:
        proxy.close()
    print(out[out.find("=== SUMMARY"):] if "=== SUMMARY" in out else out[-3000:])
    if rc != 0:
        print_failures(os.path.join(cwd, "results"))
    check(rc == 0, "the conformance suite's server scenarios pass but for the listed ones", out)
    for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams",
                     "dns-rebinding-protection", "server-sse-polling"):
        check(f"✓ {scenario}:" in out, f"conformance: {scenario} passes", out)


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} SANDBOX", file=sys.stderr)
        return 2
    sandbox = sys.argv[1]
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    if not os.path.exists(os.path.join(CLIENTS, "node")):
        print("FAIL: no MCP clients in .deps/mcp-clients (run tests/mcp/fetch-clients)")
        return 1
    def body(srv, keys, tmp):
        # node 22 first: the clients' scripts start with `#!/usr/bin/env node`
        env = dict(srv.env(), PATH=CLIENTS + os.pathsep + os.environ["PATH"],
                   SANDBOX_ACCEL=os.environ.get("SANDBOX_ACCEL", "tcg"), TMPDIR=srv.rt)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        try:
            inspector(srv, keys[0], sandbox, env, work)
            conformance(srv, keys[0], env, work)
        except Failed as e:
            return str(e)
        return None

    return api.run_with_server(sandbox, "mcp-clients-", [("alice", "--max-concurrent", "4")],
                               body)


if __name__ == "__main__":
    sys.exit(main())
