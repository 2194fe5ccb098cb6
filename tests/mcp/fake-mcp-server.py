#!/usr/bin/env python3
"""A tiny scripted MCP server over stdio, for the client's unit tests (test-mcp.c) and the
"server dies mid-call" integration test. Misbehaviour is chosen by the first argument:

  ok          well-behaved: 3 tools over 2 pages of tools/list (nextCursor)
  badjson     writes a line that is not JSON, then behaves
  wrongid     answers every tools/call first with a wrong id, then with the right one
  ping        sends a ping request and an unknown request before each tools/call answer;
              the answer's text says what the client replied
  oversized   answers tools/call with one line longer than the client's limit
  die         exits (status 3, a last word on stderr) when the tool "die" is called
  silent      never answers initialize (start-up timeout)
  escape      like die, but first starts a grandchild in a session of its own that holds
              stderr open for 5 s (then exits by itself)
  nameless    page 2 also lists 100 entries without a valid name and a tool "bin" whose
              description is 4096 bytes of invalid UTF-8
  env         echo answers with the server's environment and rlimits as JSON text
              ({"env": {...}, "core": [soft, hard], "nofile": [soft, hard]}) whatever the input

Tools: echo ({"text": string}) -> structuredContent {"echo": text}; fail -> isError;
slow -> answers after 2 s unless cancelled; cancelled -> the ids notifications/cancelled named;
die (mode die).
"""
import json
import os
import resource
import subprocess
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
lock = threading.Lock()
replies = {}  # our request id -> the client's answer
cancelled = set()

TOOLS = [
    {"name": "echo", "description": "Echo text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]},
     "outputSchema": {"type": "object", "properties": {"echo": {"type": "string"}},
                      "required": ["echo"]}},
    {"name": "fail", "description": "Always an error.", "inputSchema": {"type": "object"},
     "annotations": {"destructiveHint": True}},
    {"name": "slow", "inputSchema": {"type": "object"}},
    {"name": "die", "inputSchema": {"type": "object"}},
    {"name": "cancelled", "description": "The request ids the client cancelled.",
     "inputSchema": {"type": "object"}},
    # Rejected by our validator ($ref to another document): kept, unchecked, with a warning.
    {"name": "remote", "inputSchema": {"$ref": "http://example.com/schema.json"}},
]


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def answer(mid, result):
    send({"jsonrpc": "2.0", "id": mid, "result": result})


def call_tool(mid, params):
    name, args = params["name"], params.get("arguments", {})
    if MODE == "wrongid":
        answer(mid + 1000, {"content": [{"type": "text", "text": "wrong"}]})
        answer("not-ours", {"content": []})
    if MODE == "ping":
        send({"jsonrpc": "2.0", "id": "p1", "method": "ping"})
        send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage", "params": {}})
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "hello"}})
        for _ in range(200):
            if "p1" in replies and 77 in replies:
                break
            time.sleep(0.01)
        text = json.dumps([replies.get("p1"), replies.get(77)], sort_keys=True)
        answer(mid, {"content": [{"type": "text", "text": text}]})
        return
    if MODE == "oversized" and name == "echo":
        sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"'
                         % mid + "x" * (9 * 1024 * 1024) + '"}]}}\n')
        sys.stdout.flush()
        return
    if name == "echo" and MODE == "env":
        text = json.dumps({"env": dict(os.environ),
                           "core": resource.getrlimit(resource.RLIMIT_CORE),
                           "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)})
        answer(mid, {"content": [{"type": "text", "text": text}],
                     "structuredContent": {"echo": text}})
    elif name == "echo":
        answer(mid, {"content": [{"type": "text", "text": args.get("text", "")}],
                     "structuredContent": {"echo": args.get("text", "")}})
    elif name == "fail":
        answer(mid, {"content": [{"type": "text", "text": "it failed on purpose"}],
                     "isError": True})
    elif name == "slow":
        def later():
            time.sleep(2)
            if mid not in cancelled:
                answer(mid, {"content": [{"type": "text", "text": "slow done"}]})
        threading.Thread(target=later, daemon=True).start()
    elif name == "cancelled":
        answer(mid, {"content": [], "structuredContent": {"ids": sorted(cancelled)}})
    elif name == "die" and MODE in ("die", "escape"):
        if MODE == "escape":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"],
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL)
        print("fake server: dying on purpose", file=sys.stderr, flush=True)
        os._exit(3)  # from a thread: sys.exit would end only the thread
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "no such tool"}})


def handle(msg):
    method, mid = msg.get("method"), msg.get("id")
    if method is None:  # an answer to one of our requests
        replies[mid] = msg
        return
    if method == "initialize":
        if MODE == "silent":
            return
        if MODE == "badjson":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
        answer(mid, {"protocolVersion": "2025-03-26", "capabilities": {"tools": {}},
                     "serverInfo": {"name": "fake", "version": "1"}})
    elif method == "tools/list":
        cursor = (msg.get("params") or {}).get("cursor")
        if cursor is None:
            answer(mid, {"tools": TOOLS[:2], "nextCursor": "page2"})
        elif MODE == "nameless":
            tools = TOOLS[2:] + [{"name": ""}] * 100 + \
                [{"name": "bin", "description": "BIN", "inputSchema": {"type": "object"}}]
            line = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
            with lock:
                sys.stdout.buffer.write(line.encode().replace(b'"BIN"', b'"' + b"\xff" * 4096 + b'"')
                                        + b"\n")
                sys.stdout.flush()
        else:
            answer(mid, {"tools": TOOLS[2:]})
    elif method == "tools/call":
        threading.Thread(target=call_tool, args=(mid, msg["params"]), daemon=True).start()
    elif method == "notifications/cancelled":
        cancelled.add(msg["params"]["requestId"])
        print(f"cancelled {msg['params']['requestId']}", file=sys.stderr, flush=True)
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "nope"}})


for line in sys.stdin:
    if line.strip():
        handle(json.loads(line))
