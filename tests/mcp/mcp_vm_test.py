#!/usr/bin/env python3
"""MCP providers end to end: real MCP servers from npm (@modelcontextprotocol/server-everything
and server-memory, installed into .deps/mcp-servers by tests/mcp/fetch-servers) driven from guest
code in real VMs through `sandbox run`, over stdio and over streamable HTTP.

Usage: mcp_vm_test.py SANDBOX_BINARY TEST_NAME

Reuses tests/integration/run_test.py's Sandbox (private runtime dir, leak checks). The catalogs
are written into a temp dir of their own, removed at the end; the HTTP server is started here,
on 127.0.0.1, and its PID is the only one this test kills.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
from run_test import Failure, Sandbox, check, expect_ok  # noqa: E402

SERVERS = os.path.join(TOP, ".deps", "mcp-servers", "node_modules", "@modelcontextprotocol")
EVERYTHING = os.path.join(SERVERS, "server-everything", "dist", "index.js")
MEMORY = os.path.join(SERVERS, "server-memory", "dist", "index.js")
FAKE = os.path.join(HERE, "fake-mcp-server.py")
LOOPBACK = os.path.join(HERE, "loopback.cjs")


class Catalogs:
    """Catalog files (and the memory server's file) in a temp dir of their own."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-mcp-")

    def write(self, providers, policy=None):
        path = os.path.join(self.dir, "tools.json")
        with open(path, "w") as f:
            json.dump({"providers": providers, **({"policy": policy} if policy else {})}, f)
        return path

    def stdio(self, **extra):
        return self.write({
            "everything": {"kind": "mcp", "command": ["node", EVERYTHING, "stdio"], **extra},
            "memory": {"kind": "mcp", "command": ["node", MEMORY],
                       "env": {"MEMORY_FILE_PATH": os.path.join(self.dir, "memory.json")}},
        })

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def run_js(sbx, cat, code, **kw):
    return sbx.run(code, "javascript", "--tools", cat, **kw)


def result_of(r):
    check("result" in r, "a result", json.dumps(r)[:3000])
    return r["result"]


# ---- the tests -------------------------------------------------------------------------------

def test_mcp_list(sbx, cats):
    """`sandbox tools --types` lists the tools the servers list (both languages)."""
    cat = cats.stdio()
    for lang, needles in (("ts", ["echo(input: { message: string; })", "create_entities(",
                                  "read_graph("]),
                          ("py", ["def echo(", "def create_entities(", "def read_graph("])):
        p = subprocess.run([sbx.binary, "tools", "--types", lang, "--tools", cat],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"sandbox tools --types {lang}", p.stderr)
        for n in needles:
            check(n in p.stdout, f"{lang}: {n!r} listed", p.stdout[:3000])


def test_mcp_call_js(sbx, cats):
    """echo, add, memory create_entities then read_graph, and a tool error, from JavaScript."""
    code = r'''
const e = await tools.everything.echo({message: "hi there"});
const s = await tools.everything.add({a: 2, b: 40});
await tools.memory.create_entities({entities: [
  {name: "Ada", entityType: "person", observations: ["wrote the first program"]}]});
const g = await tools.memory.read_graph({});
let err = null;
try { await tools.everything.annotatedMessage({messageType: "nope"}); }
catch (x) { err = x.name + ": " + x.message; }
({echo: e[0].text, sum: s[0].text, graph: JSON.parse(g[0].text), err})
'''
    r = run_js(sbx, cats.stdio(), code)
    expect_ok(r)
    res = result_of(r)
    check(res["echo"] == "Echo: hi there", "echo", json.dumps(res))
    check("42" in res["sum"], "add", json.dumps(res))
    names = [e["name"] for e in res["graph"]["entities"]]
    check(names == ["Ada"], "read_graph sees the entity created", json.dumps(res))
    check(res["err"] and "ValidationError" in res["err"], "enum violation is a validation error",
          json.dumps(res))
    check(len(r["tool_calls"]) == 5, "5 calls recorded", json.dumps(r["tool_calls"])[:2000])


def test_mcp_tool_error(sbx, cats):
    """A tool whose result says isError, and a JSON-RPC error: tool_error in the guest."""
    # `fail` is marked destructive: the policy would hold it for an approval (see
    # test_mcp_destructive); a rule lets it run here, so that its isError answer is tested.
    cat = cats.write({"fake": {"kind": "mcp", "command": [sys.executable, FAKE, "ok"]}},
                     policy={"rules": [{"match": "fake.fail", "action": "allow"}]})
    code = r'''
const out = [];
for (const f of [() => tools.fake.fail({}), () => tools.fake.die({})]) {
  try { await f(); out.push("no error"); } catch (x) { out.push(x.name + ": " + x.message); }
}
out
'''
    r = run_js(sbx, cat, code)
    expect_ok(r)
    res = result_of(r)
    check("it failed on purpose" in res[0], "isError text as the message", json.dumps(res))
    check("no such tool" in res[1], "JSON-RPC error as the message", json.dumps(res))
    check(all(x.startswith("ToolError") for x in res), "ToolError both", json.dumps(res))


def test_mcp_destructive(sbx, cats):
    """A tool the server marks destructiveHint needs an approval by default: with no terminal
    and no `sandbox serve` to ask, a direct run denies it at once, and says so in the record."""
    cat = cats.write({"fake": {"kind": "mcp", "command": [sys.executable, FAKE, "ok"]}})
    code = r'''
let out;
try { await tools.fake.fail({}); out = "ran"; } catch (x) { out = x.name + ": " + x.message; }
out
'''
    r = run_js(sbx, cat, code)
    expect_ok(r)
    res = result_of(r)
    check(res.startswith("PolicyDenied") and "needs an approval" in res, "held, then denied", res)
    pol = r["tool_calls"][0].get("policy") or {}
    check(pol.get("action") == "approve" and pol.get("destructive") is True,
          "the record says: approve, because destructive", json.dumps(r["tool_calls"]))


def test_mcp_schema(sbx, cats):
    """An input that fails the listed inputSchema never reaches the server."""
    code = r'''
let msg = null;
try { await tools.everything.add({a: "two", b: 1}); } catch (x) { msg = x.name + ": " + x.message; }
msg
'''
    r = run_js(sbx, cats.stdio(), code)
    expect_ok(r)
    res = result_of(r)
    check(res.startswith("ValidationError") and "input.a" in res, "validation_error on input.a",
          res)


def test_mcp_parallel_js(sbx, cats):
    """100 calls in parallel (Promise.all) on one server."""
    code = r'''
const rs = await Promise.all(Array.from({length: 100}, (_, i) => tools.everything.add({a: i, b: 1})));
rs.map(r => r[0].text).filter((t, i) => t.includes(String(i + 1))).length
'''
    r = run_js(sbx, cats.stdio(), code, timeout=300)
    expect_ok(r)
    check(result_of(r) == 100, "100 right answers", json.dumps(r)[:2000])
    check(len(r["tool_calls"]) == 100, "100 calls recorded")


def test_mcp_parallel_py(sbx, cats):
    """100 calls in parallel from Python's asyncio form, then a plain call."""
    code = r'''
import asyncio
async def main():
    rs = await asyncio.gather(*[tools.everything.add.aio({"a": i, "b": 1}) for i in range(100)])
    return sum(1 for i, r in enumerate(rs) if str(i + 1) in r[0]["text"])
n = asyncio.run(main())
e = tools.everything.echo({"message": "plain"})
[n, e[0]["text"]]
'''
    r = sbx.run(code, "python", "--tools", cats.stdio(), timeout=300)
    expect_ok(r)
    check(result_of(r) == [100, "Echo: plain"], "100 right answers, then a plain call",
          json.dumps(r)[:2000])


def test_mcp_server_dies(sbx, cats):
    """The server exits during a call: that call and later ones fail with a clear tool_error."""
    cat = cats.write({"fake": {"kind": "mcp", "command": [sys.executable, FAKE, "die"]}})
    code = r'''
const out = [];
for (const f of [() => tools.fake.die({}), () => tools.fake.echo({text: "after"})]) {
  try { await f(); out.push("no error"); } catch (x) { out.push(x.name + ": " + x.message); }
}
out
'''
    r = run_js(sbx, cat, code)
    expect_ok(r)
    res = result_of(r)
    check("exited (status 3)" in res[0] and "dying on purpose" in res[0],
          "exit status and stderr in the message", json.dumps(res))
    check(res[1].startswith("ToolError") and "exited" in res[1], "later calls fail too",
          json.dumps(res))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mcp_http(sbx, cats):
    """Streamable HTTP: server-everything's streamableHttp mode on 127.0.0.1."""
    port = free_port()
    env = dict(os.environ, PORT=str(port))
    # loopback.cjs makes the server listen on 127.0.0.1 only (it would take every interface).
    server = subprocess.Popen(["node", "--require", LOOPBACK, EVERYTHING, "streamableHttp"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                check(time.monotonic() < deadline and server.poll() is None,
                      "the HTTP server came up")
                time.sleep(0.2)
        cat = cats.write({"everything": {"kind": "mcp", "url": f"http://127.0.0.1:{port}/mcp"}})
        code = r'''
const rs = await Promise.all(Array.from({length: 20}, (_, i) => tools.everything.add({a: i, b: 1})));
const e = await tools.everything.echo({message: "over http"});
[rs.filter((r, i) => r[0].text.includes(String(i + 1))).length, e[0].text]
'''
        r = run_js(sbx, cat, code, timeout=300)
        expect_ok(r)
        check(result_of(r) == [20, "Echo: over http"], "answers over HTTP", json.dumps(r)[:2000])
    finally:
        server.kill()
        server.wait()


TESTS = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in TESTS:
        print(f"usage: {sys.argv[0]} SANDBOX {{{'|'.join(TESTS)}}}", file=sys.stderr)
        return 2
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    if not os.path.exists(MEMORY):
        print("FAIL: no MCP test servers in .deps/mcp-servers (run tests/mcp/fetch-servers)")
        return 1
    sbx, cats = Sandbox(sys.argv[1]), Catalogs()
    failure = None
    try:
        TESTS[sys.argv[2]](sbx, cats)
    except Failure as e:
        failure = e
    finally:
        cats.close()
        try:
            sbx.close()
        except Failure as e:
            failure = failure or e
    if failure:
        print(f"FAIL: {failure}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
