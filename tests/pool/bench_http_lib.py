"""Helpers to drive `sandbox serve --listen` from outside for scripts/bench's HTTP figures
(docs/api.md): tenants in a private store, a server on a free loopback port, a client that times
POST /v1/executions?wait= from send to the whole answer, tenants' clients submitting back to
back for a while, and stopping the server with every process it had checked gone. The standard
library only (http.client, not python3-requests as tests/service/api.py), so scripts/bench runs
wherever Python does."""
import datetime
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time

import bench_serve_lib as lib

REQUEST_SLACK_S = 30  # beyond ?wait=, for the answer itself on a loaded machine


def tenant_add(sandbox, db, name, *opts):
    """`sandbox tenant add NAME --db DB OPTS...`: the API key it prints once (docs/service.md)."""
    p = subprocess.run([sandbox, "tenant", "add", "--db", db, *opts, name], capture_output=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"sandbox tenant add {name}: exit {p.returncode}: "
                           f"{p.stderr.decode(errors='replace')}")
    return p.stdout.decode().strip()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to 0, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(sandbox, sock, db, *args, cwd=None, env=None):
    """`sandbox serve --listen 127.0.0.1:PORT --db DB --socket SOCK ARGS...` once it answers
    GET /v1/health: (the process, PORT). Stop it with stop()."""
    port = free_port()
    serve = lib.start_serve(sandbox, sock, "--listen", f"127.0.0.1:{port}", "--db", db, *args,
                            cwd=cwd, env=env)
    end = time.monotonic() + 240  # the first start of a profile may make its snapshot
    while time.monotonic() < end:
        if serve.poll() is not None:
            raise SystemExit(f"sandbox serve --listen exited {serve.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/health")
            if c.getresponse().status == 200:
                c.close()
                return serve, port
        except OSError:
            pass
        time.sleep(0.1)
    stop(serve, sock)
    raise SystemExit("sandbox serve --listen did not answer /v1/health")


def start_time(pid):
    """@pid's start time (clock ticks since boot), or None if it is gone: with the PID it names
    one process, so a PID reused meanwhile is never taken for ours."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def stop(serve, sock):
    """SIGTERM to serve, waited; then every process it had (its descendants and the QEMUs its
    status names, taken just before) must go within 15 s: (exit status, how many it had, the
    PIDs left, which are killed). Pooled VMs run below their jails, not as serve's children,
    hence the whole tree and the status."""
    pids = set(lib.descendants(serve.pid))
    try:
        st = lib.status(sock)
        for p in [st, *st.get("profiles", {}).values()]:
            for k in ("ready_pids", "running_pids", "prestarted_pids"):
                pids.update(p.get(k, []))
    except (OSError, ValueError):  # no socket yet, or serve is gone
        pass
    seen = {p: start_time(p) for p in pids}
    seen = {p: t for p, t in seen.items() if t is not None}
    try:
        lib.stop_serve(serve)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.wait(timeout=30)
    end = time.monotonic() + 15
    left = seen
    while True:
        left = {p: t for p, t in left.items() if start_time(p) == t}
        if not left or time.monotonic() > end:
            break
        time.sleep(0.1)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return serve.returncode, len(seen), sorted(left)


def iso_ms(text):
    """Unix ms of an RFC 3339 time of the API (microseconds, Z)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def started_to_finished_ms(ex):
    """finished_at - started_at of an execution object: serve's clock from the exec's start (the
    pool's claim set going) to its done, so the claim included."""
    return iso_ms(ex["finished_at"]) - iso_ms(ex["started_at"])


def peer_closed(sock):
    """Whether the server closed @sock (an EOF is waiting; anything else counts as open)."""
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Client:
    """One tenant's HTTP/1.1 client. A request's clock includes its connect when there is no
    open connection (the server answers Connection: close, so every request makes one, as any
    client of it does); reconnections are counted in `closed`. Whether the server closes a
    connection it did not say it would is learnt on the first answer (a close within 50 ms); a
    client that knows it does reconnects without waiting for the close, so back-to-back
    requests never race it."""

    def __init__(self, port, key, wait_s=60):
        self.port, self.key, self.wait_s = port, key, wait_s
        self.conn, self.closes, self.closed, self.answers = None, None, 0, 0
        self.sent_ms = self.answered_ms = None  # unix ms of the last request's send and answer

    def _connect(self):
        if self.conn is not None:
            if not self.closes and not peer_closed(self.conn.sock):
                return
            self.conn.close()
            self.closed += 1
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                               timeout=self.wait_s + REQUEST_SLACK_S)
        self.conn.connect()  # sets TCP_NODELAY; the request goes out in one send

    def request(self, method, path, body=None):
        """(HTTP status, ms from send to the whole answer, the answer's JSON, Retry-After).
        The time includes the connect when there is no open connection (each answer says
        Connection: close: every request pays its connect, as any client does)."""
        headers = {"Authorization": "Bearer " + self.key}
        if body is not None:
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.sent_ms, t = time.time() * 1000, time.monotonic()
        self._connect()
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        ms = (time.monotonic() - t) * 1000
        self.answered_ms = time.time() * 1000  # the wall clock: serve's times are in it too
        self.answers += 1
        if r.will_close:
            self.conn.close()
            self.conn = None
            self.closed += 1
        elif self.closes is None:
            # Not timed: whether the server closes a connection it did not say it would.
            ready, _, _ = select.select([self.conn.sock], [], [], 0.05)
            self.closes = bool(ready) and peer_closed(self.conn.sock)
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        return r.status, ms, obj, r.getheader("Retry-After")

    def run(self, lang, code):
        """POST /v1/executions?wait=: the execution, answered when it ended."""
        return self.request("POST", f"/v1/executions?wait={self.wait_s}",
                            {"language": lang, "code": code})

    def close(self):
        if self.conn is not None:
            self.conn.close()


class McpClient:
    """A client of `/mcp` (MCP over streamable HTTP) in one MCP session, as the official SDK
    talks: every POST accepts JSON and SSE, and a call's answer comes as an SSE stream."""

    HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def __init__(self, port, key):
        self.port, self.key, self.session, self.next_id = port, key, None, 1
        self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "bench", "version": "1"}}})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message):
        """(ms from send to the whole answer, the JSON-RPC answer or None)."""
        headers = dict(self.HEADERS, Authorization="Bearer " + self.key)
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        t = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers=headers)
        r = conn.getresponse()
        data = r.read().decode()
        ms = (time.monotonic() - t) * 1000
        conn.close()
        if r.status not in (200, 202):
            raise RuntimeError(f"POST /mcp: HTTP {r.status}: {data[:300]}")
        self.session = self.session or r.getheader("Mcp-Session-Id")
        if r.getheader("Content-Type", "").startswith("text/event-stream"):
            lines = [ln[5:].strip() for ln in data.splitlines() if ln.startswith("data:")]
            data = lines[-1] if lines else ""
        return ms, json.loads(data) if data else None

    def execute(self, lang, code):
        """One `execute` that must end ok: the ms from send to the whole answer."""
        self.next_id += 1
        ms, answer = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                                "params": {"name": "execute",
                                           "arguments": {"language": lang, "code": code}}})
        result = (answer or {}).get("result", {})
        if result.get("isError") is not False:
            raise RuntimeError(f"MCP execute: {answer!r}"[:600])
        return ms


def execution(client, lang, code):
    """One execution that must end ok: (ms, the execution object)."""
    status, ms, ex, _ = client.run(lang, code)
    if status not in (200, 201) or ex is None or ex.get("status") != "ok":
        raise RuntimeError(f"POST /v1/executions: HTTP {status}: {ex!r}"[:600])
    return ms, ex


ENDED_POLL_S = 30  # GET ?wait= of a submitted execution


def follow(c, ex):
    """GET /v1/executions/ID?wait= until @ex (as POST answered it) ended: the last object."""
    while ex.get("status") in ("queued", "running"):
        status, _, ex, _ = c.request("GET", f"/v1/executions/{ex['id']}?wait={ENDED_POLL_S}")
        if status != 200 or ex is None:
            raise RuntimeError(f"GET /v1/executions/ID: HTTP {status}: {ex!r}"[:300])
    return ex


def tenants_back_to_back(port, keys, lang, code, seconds, inflight):
    """Each tenant's key gets @inflight client threads, each submitting @lang @code back to back
    (POST, then follow() it; the next once it ended) for @seconds: per tenant, the executions
    that ended ok and whose end the client heard within the window; also the 429s (each waits
    its Retry-After, at most 5 s) and any other failures, over all tenants. Executions still
    out at the end are followed to their end (and not counted)."""
    done = [0] * len(keys)
    limited, failed = [0], []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def worker(i, key):
        c = Client(port, key)
        try:
            while time.monotonic() < end:
                status, _, ex, retry = c.request("POST", "/v1/executions",
                                                 {"language": lang, "code": code})
                if status == 201 and ex is not None:
                    ex = follow(c, ex)
                with lock:
                    if status == 201 and ex is not None and ex.get("status") == "ok":
                        if time.monotonic() <= end:
                            done[i] += 1
                    elif status == 429:
                        limited[0] += 1
                    else:
                        failed.append(f"HTTP {status}: {ex!r}"[:300])
                if status == 429:
                    time.sleep(min(5, int(retry or 1)))
        except (OSError, RuntimeError, http.client.HTTPException) as e:
            with lock:
                failed.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i, key), daemon=True)
               for i, key in enumerate(keys) for _ in range(inflight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    return done, limited[0], failed
