#!/usr/bin/env python3
"""A JSON API on 127.0.0.1 for the http provider's tests (test-tools-policy.py).

Usage: http-test-server.py TOKEN   -- prints its port on stdout, then serves until killed.
Every request must carry `Authorization: Bearer TOKEN` (else 401); the answers never echo it.
  GET  /repos/<owner>/<repo>?...  -> {"path": <raw path and query>, "auth_ok": true}
  GET  /missing                   -> 404 {"error": "no such thing"}
  GET  /text                      -> 200 text/plain (not JSON)
  POST /items/<id>                -> {"path": ..., "body": <the JSON body>}
  GET  /guarded                   -> {"guarded": true}
"""
import http.server
import json
import sys

TOKEN = sys.argv[1]


class Handler(http.server.BaseHTTPRequestHandler):
    def send(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self.send(401, '{"error": "missing or wrong token"}')
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if self.path.startswith("/missing"):
            self.send(404, '{"error": "no such thing"}')
        elif self.path.startswith("/text"):
            self.send(200, "plain words", "text/plain")
        elif self.path.startswith("/guarded"):
            self.send(200, '{"guarded": true}')
        else:
            self.send(200, json.dumps({"path": self.path, "auth_ok": True}))

    def do_POST(self):
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.send(200, json.dumps({"path": self.path, "body": body}))

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
