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
  resume          -> an SSE stream with only a priming event (id "r-1", retry 200) that ends;
                     the GET that resumes it (Last-Event-ID "r-1") gets the answer, and stays
                     open after it (the client must leave it)
  resume_twice    -> the same, but the first GET gets another priming event ("r-3") and ends;
                     the second GET (Last-Event-ID "r-3") gets the answer
  noresume        -> an SSE stream that ends without any event id (cannot be resumed)
  gone            -> a priming event (retry 50) and the end; every GET gets an empty stream
  elicit          -> an SSE stream asking elicitation/create, sampling/createMessage, roots/list
                     and an unknown method, that waits for the four answers (at most 5 s) and
                     answers with them as structuredContent {"answers": [...]}
  elicit_general  -> the same questions on the general stream (the GET without Last-Event-ID,
                     or with one starting "g-": reopened; held open), the answer a JSON body
  end_general     -> the general stream sends an event with id "g-7" and retry 100, and ends
  generals        -> structuredContent {"gets": [...]}: the Last-Event-ID of each general GET
                     ("-" for none)
  resumes         -> structuredContent {"gets": [{"last_event_id", "after_ms"}, ...]}: the GETs
                     received, each with the time since the stream it resumes ended
A DELETE of the session prints "DELETE <session>" on stdout.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION = "sess-1"
pings = []
answers = {}  # id of a request of ours (elicit) -> the client's answer
answered = threading.Condition()
gets = []  # the GETs received: {"last_event_id", "after_ms"}
streams = {}  # event id a GET may resume from -> (what it gets: "answer"/"again"/"empty", id, t)
general = []  # events queued for the general stream (None: end it)
general_gets = []  # the Last-Event-ID of each GET of the general stream, "-" for none
general_cv = threading.Condition()

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
] + [{"name": n, "inputSchema": {"type": "object"}}
     for n in ["resume", "resume_twice", "noresume", "gone", "elicit", "elicit_general",
               "end_general", "generals", "resumes"]]


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

    def stream_start(self):
        """An SSE response without a length: it ends when the connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, text):
        self.wfile.write(text.encode())
        self.wfile.flush()

    def do_GET(self):
        if self.headers.get("Mcp-Session-Id") != SESSION or \
                self.headers.get("MCP-Protocol-Version") != "2025-06-18" or \
                "text/event-stream" not in self.headers.get("Accept", ""):
            return self.reply(400, b"missing session, version or Accept")
        last = self.headers.get("Last-Event-ID")
        if last is None or last.startswith("g-"):
            general_gets.append(last or "-")
            return self.general_stream()
        what, mid, ended = streams.get(last, ("empty", None, time.monotonic()))
        gets.append({"last_event_id": last, "after_ms": int((time.monotonic() - ended) * 1000)})
        self.stream_start()
        if what == "answer":
            self.event("id: r-9\ndata: " + json.dumps({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "resumed"}]}}) + "\n\n")
            time.sleep(10)  # open after the answer: the client leaves by itself
        elif what == "again":
            self.event("id: r-3\ndata: \n\n")
            streams["r-3"] = ("answer", mid, time.monotonic())

    def general_stream(self):
        """The general stream: open until the client leaves, with what general holds."""
        self.stream_start()
        while True:
            with general_cv:
                general_cv.wait_for(lambda: general, timeout=1)
                items = list(general)
                general.clear()
            self.event("".join(i for i in items if i is not None) or ": idle\n\n")
            if None in items:
                return

    def elicit(self, mid, on_general):
        p = "g-" if on_general else ""
        asks = [(p + "elicit-1", "elicitation/create", {"message": "name?", "requestedSchema": {
                    "type": "object", "properties": {"n": {"type": "string"}}}}),
                (p + "sample-1", "sampling/createMessage", {"messages": [], "maxTokens": 1}),
                (p + "roots-1", "roots/list", {}),
                (p + "odd-1", "no/such/method", {})]
        events = ["data: " + json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                         "params": params}) + "\n\n"
                  for rid, method, params in asks]
        if on_general:
            with general_cv:
                general.extend(events)
                general_cv.notify_all()
        else:
            self.stream_start()
            self.event("".join(events))
        with answered:
            answered.wait_for(lambda: all(a[0] in answers for a in asks), timeout=5)
            got = [answers.get(a[0]) for a in asks]
        answer = {"jsonrpc": "2.0", "id": mid, "result": {
            "content": [], "structuredContent": {"answers": got}}}
        if on_general:
            return self.json(answer)
        self.event("data: " + json.dumps(answer) + "\n\n")

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
        if method is None:  # an answer of the client (to our ping, our elicit requests)
            with answered:
                if str(msg.get("id")).startswith("srv-ping"):
                    pings.append(msg)
                answers[msg.get("id")] = msg
                answered.notify_all()
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
        if name in ("resume", "resume_twice", "gone"):
            first = {"resume": "answer", "resume_twice": "again", "gone": "empty"}[name]
            self.stream_start()
            self.event("id: r-1\nretry: %d\ndata: \n\n" % (50 if name == "gone" else 200))
            streams["r-1"] = (first, mid, time.monotonic())
            return None
        if name == "noresume":
            self.stream_start()
            self.event("retry: 50\ndata: \n\n")
            return None
        if name in ("elicit", "elicit_general"):
            return self.elicit(mid, name == "elicit_general")
        if name == "end_general":
            with general_cv:
                general.extend(["id: g-7\nretry: 100\ndata: \n\n", None])
                general_cv.notify_all()
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {}}})
        if name == "generals":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {"gets": general_gets}}})
        if name == "resumes":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {"gets": gets}}})
        if name == "log":
            return self.json({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [], "structuredContent": {"pings": pings}}})
        return self.reply(404)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
