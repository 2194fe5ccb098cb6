#!/usr/bin/env python3
"""A tiny scripted MCP server over streamable HTTP, for the client's unit tests (test-mcp.c).

Listens on 127.0.0.1 (an ephemeral port, printed as the first line of stdout), endpoint /mcp.
initialize answers with a JSON body and the header Mcp-Session-Id; every later POST must carry
that session id and MCP-Protocol-Version (else 400). tools/list answers as an SSE stream that
first sends a ping request and a notification. Tools:
  echo ({"text"}) -> a JSON body, structuredContent {"echo": text}
  sse             -> an SSE stream with a comment, a CRLF event of another type, and the answer
                     split over two data lines
  status500       -> HTTP 500
  log             -> structuredContent {"pings": answers to our ping received}
  slow            -> structuredContent {} after 1 s (calls must run in parallel)
  redirect        -> HTTP 302 to /moved (which would answer "followed")
  accepted        -> HTTP 202 without a body (a request that is never answered)
  flood           -> an SSE stream of 200 pings and no answer; the POSTs answering those pings
                     are never answered (held until the server is killed)
A DELETE of the session prints "DELETE <session>" on stdout.
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION = "sess-1"
pings = []

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"},
     "outputSchema": {"type": "object", "properties": {"echo": {"type": "string"}}}},
    {"name": "sse", "inputSchema": {"type": "object"}},
    {"name": "status500", "inputSchema": {"type": "object"}},
    {"name": "log", "inputSchema": {"type": "object"}},
    {"name": "slow", "inputSchema": {"type": "object"}},
    {"name": "redirect", "inputSchema": {"type": "object"}},
    {"name": "accepted", "inputSchema": {"type": "object"}},
    {"name": "flood", "inputSchema": {"type": "object"}},
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", ctype=None, headers=()):
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def json(self, obj, headers=()):
        self.reply(200, json.dumps(obj).encode(), "application/json", headers)

    def sse(self, text):
        self.reply(200, text.encode(), "text/event-stream")

    def do_DELETE(self):
        print("DELETE", self.headers.get("Mcp-Session-Id"), flush=True)
        self.reply(204)

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, mid = msg.get("method"), msg.get("id")
        if "application/json" not in self.headers.get("Accept", "") or \
                "text/event-stream" not in self.headers.get("Accept", ""):
            return self.reply(406)
        if method == "initialize":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake-http", "version": "1"}}},
                headers=[("Mcp-Session-Id", SESSION)])
        if self.headers.get("Mcp-Session-Id") != SESSION or \
                self.headers.get("MCP-Protocol-Version") != "2025-06-18":
            return self.reply(400, b"missing session or version")
        if method is None and str(msg.get("id")).startswith("flood"):
            time.sleep(60)  # never answered: the client must not pile up more
            return self.reply(202)
        if method is None:  # an answer of the client (to our ping)
            pings.append(msg)
            return self.reply(202)
        if mid is None:  # a notification
            return self.reply(202)
        if method == "tools/list":
            return self.sse(
                'event: message\ndata: {"jsonrpc":"2.0","id":"srv-ping","method":"ping"}\n\n'
                'data: {"jsonrpc":"2.0","method":"notifications/message",'
                '"params":{"level":"info","data":"x"}}\n\n'
                "data: " + json.dumps({"jsonrpc": "2.0", "id": mid,
                                       "result": {"tools": TOOLS}}) + "\n\n")
        name = msg["params"]["name"]
        args = msg["params"].get("arguments", {})
        if name == "echo":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {"echo": args.get("text", "")}}})
        if name == "sse":
            return self.sse(': a comment\r\nevent: other\r\ndata: ignored\r\n\r\n'
                            'data: {"jsonrpc":"2.0","id":%d,\r\ndata: "result":{"content":'
                            '[{"type":"text","text":"from sse"}]}}\r\n\r\n' % mid)
        if name == "status500":
            return self.reply(500, b"boom")
        if self.path == "/moved":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "followed"}]}})
        if name == "slow":
            time.sleep(1)
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {}}})
        if name == "redirect":
            return self.reply(302, headers=[("Location", "/moved")])
        if name == "accepted":
            return self.reply(202)
        if name == "flood":
            return self.sse("".join('data: {"jsonrpc":"2.0","id":"flood-%d","method":"ping"}\n\n'
                                    % i for i in range(200)))
        if name == "log":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {"pings": pings}}})
        return self.reply(404)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
