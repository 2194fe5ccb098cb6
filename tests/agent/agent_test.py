#!/usr/bin/env python3
"""Drives the real guest agent on the host: the agent listens on a unix socket (--listen-unix)
and this script plays the host (framing and messages as in docs/protocol.md).

Usage: agent_test.py AGENT_BINARY RUNNERS_DIR TEST_NAME   (or "all")

Each test starts its own agent in a fresh temp dir, tracks it by PID, checks that it has no
child process left when the test ends (the runner's whole process group is gone), stops it
with SIGTERM (SIGKILL if it hangs) and removes the temp dir. SBX_TEST_NODE and
SBX_TEST_PYTHON choose the runtimes (default /usr/bin/node, /usr/bin/python3). The TypeScript
tests need a node with type stripping (22.13 or later): SBX_TEST_NODE if it has it, else the
image's own (the one guest-image/build-image keeps in build/image-cache/node/), else they skip.
"""
import base64
import glob
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

NODE = os.environ.get("SBX_TEST_NODE", "/usr/bin/node")
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.environ.get("SBX_TEST_PYTHON", "/usr/bin/python3")
TIMEOUT = 30  # seconds any single expected message may take (runtimes start slowly under load)


class Failure(Exception):
    pass


class Skip(Exception):
    pass


DATA_FRAME = 0x80000000  # bit 31 of a header: a data frame (docs/protocol.md, "Data frames")


def data_frame(data):
    """@data in a data frame (nothing when it is empty: no data frame)."""
    return struct.pack(">I", DATA_FRAME | len(data)) + data if data else b""


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}" if detail else what)


# ---- the fake host ---------------------------------------------------------------------------

class Host:
    """One connection to the agent."""

    def __init__(self, path, agent=None):
        self.agent = agent
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(path)
        self.next_id = 1

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, msg, data=b""):
        """@msg in a frame; with @data, announced (data_len) and sent in its data frame."""
        if data:
            msg = dict(msg, data_len=len(data))
        body = json.dumps(msg).encode()
        self.send_raw(struct.pack(">I", len(body)) + body + data_frame(data))

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def recv_text(self):
        """The next message's JSON text, or None when the agent closed the connection."""
        head = self._exact(4)
        if head is None:
            return None
        (n,) = struct.unpack(">I", head)
        body = self._exact(n)
        check(body is not None, "connection closed in the middle of a frame")
        return body.decode()

    def recv(self):
        """The next message, or None when the agent closed the connection. A file_result that
        announces data (data_len) gets it from its data frame, the next one, as bytes under
        "data"."""
        text = self.recv_text()
        msg = None if text is None else json.loads(text)
        if msg and msg["type"] == "file_result" and msg["ok"] and "data_len" in msg:
            check("data" not in msg, "no data in the JSON", text[:200])
            head = self._exact(4)
            check(head == struct.pack(">I", DATA_FRAME | msg["data_len"]),
                  "the data frame announced comes next", repr(head))
            msg["data"] = self._exact(msg["data_len"])
            check(msg["data"] is not None, "connection closed in the middle of a data frame")
        return msg

    def expect(self, type_):
        msg = self.recv()
        check(msg is not None and msg["type"] == type_, f"expected {type_}", repr(msg)[:2000])
        return msg

    def expect_after_output(self, type_):
        """The next message that is not output (the protocol does not say in how many pieces
        output comes: "spinning" and its newline may be two)."""
        msg = self.recv()
        while msg is not None and msg["type"] == "output":
            msg = self.recv()
        check(msg is not None and msg["type"] == type_, f"expected {type_}", repr(msg)[:2000])
        return msg

    def expect_closed(self):
        msg = self.recv()
        check(msg is None, "expected the agent to close the connection", repr(msg)[:500])

    def hello(self, token="tok-123", **fields):
        self.send({"type": "hello", "version": 1, "token": token,
                   "entropy": base64.b64encode(os.urandom(64)).decode(),
                   "time_us": int(time.time() * 1e6), **fields})
        return self.expect("hello_ok")

    def execute(self, code, language, **fields):
        exec_id = f"x{self.next_id}"
        self.next_id += 1
        msg = {"type": "execute", "id": exec_id, "language": language, "code": code,
               "tools": fields.pop("tools", [])}
        msg.update(fields)
        self.send(msg)
        if self.agent:  # TypeScript runs in the JavaScript runner
            self.agent.executed.add("javascript" if language == "typescript" else language)
        return exec_id

    def file_send(self, op, path=None, data=b"", **fields):
        """Send one file request (data, bytes, in its data frame); returns its seq."""
        self.next_seq = getattr(self, "next_seq", 0) + 1
        msg = {"type": "file", "seq": self.next_seq, "op": op, **fields}
        if path is not None:
            msg["path"] = path
        self.send(msg, data)
        return self.next_seq

    def file_answer(self, seq):
        r = self.expect("file_result")
        check(r["seq"] == seq, "file_result with the file's seq", repr(r)[:500])
        return r

    def file(self, op, path=None, **fields):
        """One file request and its file_result (same seq); data (bytes) goes in a data
        frame, a read's comes back as bytes."""
        return self.file_answer(self.file_send(op, path, **fields))

    def file_error(self, op, path, errno_name, code="validation_error", **fields):
        r = self.file(op, path, **fields)
        check(not r["ok"] and r["error"]["code"] == code and r["error"]["type"] == errno_name
              and r["error"]["message"], f"{op} {path}: {code} {errno_name}", r)
        return r

    def upload(self, path, data, chunk=1024 * 1024):
        """Write @data to @path in chunks; returns the last answer."""
        off = 0
        while True:
            piece = data[off:off + chunk]
            r = self.file("write", path, offset=off, data=piece,
                          last=off + len(piece) == len(data))
            check(r["ok"] and r.get("size", 0) == off + len(piece), "write answered", r)
            off += len(piece)
            if off == len(data):
                return r

    def download(self, path, chunk=1024 * 1024):
        data = b""
        while True:
            r = self.file("read", path, offset=len(data), length=chunk)
            check(r["ok"], f"read {path}", r)
            piece = r.get("data", b"")
            data += piece
            if len(data) >= r.get("size", 0) or not piece:
                return data

    def run(self, code, language, on_tool_call=None, **fields):
        """Execute and collect everything until done. @on_tool_call(msg) returns the
        tool_result fields {ok, result|error}, or None to answer later (pending list)."""
        exec_id = self.execute(code, language, **fields)
        r = Result(exec_id)
        while True:
            msg = self.recv()
            check(msg is not None, "connection closed before done", r.summary())
            r.messages.append(msg)
            check(msg.get("id") == exec_id, "message for another execution", repr(msg))
            t = msg["type"]
            if t == "started":
                check(not r.started and not r.output, "started comes first, once")
                r.started = True
            elif t == "output":
                r.output.append((msg["stream"], base64.b64decode(msg["data"])))
            elif t == "tool_call":
                r.calls.append(msg)
                answer = on_tool_call(msg) if on_tool_call else None
                if answer is not None:
                    self.send(dict({"type": "tool_result", "id": exec_id,
                                    "call_id": msg["call_id"]}, **answer))
            elif t == "replay_log":
                check(r.done is None, "replay_log before done", repr(msg))
                r.logs.append(msg)
            elif t == "done":
                r.done = msg
                return r
            else:
                raise Failure(f"unexpected message {msg!r}")


class Result:
    def __init__(self, exec_id):
        self.id = exec_id
        self.started = False
        self.output = []
        self.calls = []
        self.messages = []
        self.logs = []  # replay_log messages
        self.done = None

    def stream(self, name):
        return b"".join(d for s, d in self.output if s == name).decode(errors="replace")

    @property
    def stdout(self):
        return self.stream("stdout")

    @property
    def stderr(self):
        return self.stream("stderr")

    @property
    def status(self):
        return self.done["status"]

    @property
    def error(self):
        return self.done.get("error") or {}

    def summary(self):
        done = json.dumps(self.done)[:3000] if self.done else None
        return f"done={done}\nstdout={self.stdout[:1000]!r}\nstderr={self.stderr[:3000]!r}"


# ---- the agent process -----------------------------------------------------------------------

def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def runner_language(pid):
    """The language of the runner process @pid, from its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return "used"
    return "javascript" if b"runner.mjs" in cmdline else "python"


class Agent:
    def __init__(self, binary, runners, extra=(), node=None):
        self.binary, self.runners = binary, runners
        self.dir = tempfile.mkdtemp(prefix="sbx-agent-test-")
        os.chmod(self.dir, 0o711)  # --run-as: the user's runners reach the workspace in it
        self.path = os.path.join(self.dir, "agent.sock")
        self.workspace = os.path.join(self.dir, "workspace")  # the agent creates it
        self.log_path = os.path.join(self.dir, "agent.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "--listen-unix", self.path, "--runners", runners, "--node", node or NODE,
             "--python", PYTHON, "--workspace", self.workspace, *extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        # The socket file appears at bind(), a moment before listen(): wait for the listening
        # flag in /proc/net/unix (connecting to probe would be a host connection itself).
        deadline = time.monotonic() + 10
        while not self.listening():
            check(self.proc.poll() is None, "the agent exited at start", self.read_log())
            check(time.monotonic() < deadline, "the agent did not listen within 10 s")
            time.sleep(0.01)
        # The pre-started runners (one per language) exist before the agent listens. They
        # are not left behind by anything: they wait for an execute, and die with the agent.
        self.prestarted = {pid: runner_language(pid) for pid in children(self.proc.pid)}
        self.executed = set()  # languages executed: their pre-started runner is used up

    def children(self):
        """The agent's children but the pre-started runners that still wait."""
        return [p for p in children(self.proc.pid)
                if self.prestarted.get(p, "used") in self.executed | {"used"}]

    def listening(self):
        with open("/proc/net/unix") as f:
            for line in f:
                fields = line.split()
                # Flags 00010000: __SO_ACCEPTCON, a listening socket.
                if len(fields) >= 8 and fields[7] == self.path and fields[3] == "00010000":
                    return True
        return False

    def connect(self):
        return Host(self.path, self)

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_no_children(self, timeout=10):
        deadline = time.monotonic() + timeout
        while self.children():
            check(time.monotonic() < deadline,
                  f"processes left behind by the agent: {self.children()}")
            time.sleep(0.02)

    def stop(self):
        """SIGTERM by PID, SIGKILL if it hangs; then the checks and the cleanup."""
        # A runner is killed right after its done and reaped a moment later.
        deadline = time.monotonic() + 5
        while self.children() and time.monotonic() < deadline:
            time.sleep(0.02)
        left = self.children()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("the agent ignored SIGTERM")
        rc = self.proc.returncode
        self.log.close()
        sock_left = os.path.exists(self.path)
        log = self.read_log()
        shutil.rmtree(self.dir, ignore_errors=True)
        check(rc == 0, f"the agent exited with {rc}", log[-3000:])
        check(not sock_left, "the agent left its socket behind")
        check(not left, f"processes left behind by the agent: {left}")


# ---- helpers ---------------------------------------------------------------------------------

def expect_ok(r, result=..., stdout=None):
    check(r.started, "started before done", r.summary())
    check(r.status == "ok", f"status ok, got {r.status}", r.summary())
    check(r.done["exit_code"] == 0, "exit code 0", r.summary())
    if result is not ...:
        check(r.done.get("result", ...) == result, f"result {result!r}", r.summary())
    if stdout is not None:
        check(r.stdout == stdout, f"stdout {stdout!r}", r.summary())


def expect_error(r, code, type_=None, status="error"):
    check(r.status == status, f"status {status}, got {r.status}", r.summary())
    check(r.error.get("code") == code, f"error code {code}", r.summary())
    if type_:
        check(r.error.get("type") == type_, f"error type {type_}", r.summary())
    check(r.error.get("message"), "an error message", r.summary())


def add_tool(tools=("add", "fail", "deny")):
    return [{"provider": "calc", "name": t, "description": f"calc {t}"} for t in tools]


def calc(msg):
    """A fake provider: add sums, fail fails, deny is refused by policy."""
    if msg["tool"] == "add":
        i = msg["input"]
        return {"ok": True, "result": {"sum": i["a"] + i["b"]}}
    if msg["tool"] == "deny":
        return {"ok": False, "error": {"code": "policy_denied", "message": "not allowed here"}}
    return {"ok": False, "error": {"code": "tool_error", "type": "CalcError",
                                   "message": "failed on purpose"}}


# ---- the tests -------------------------------------------------------------------------------

def test_hello(agent):
    h = agent.connect()
    ok = h.hello("token-abc")
    check(ok["version"] == 1 and ok["token"] == "token-abc", "version and token echoed", ok)
    check(ok["agent"].startswith("sandbox-agent "), "agent name", ok)
    check(sorted(ok["languages"]) == ["javascript", "python", "typescript"],
          "both runtimes' languages (TypeScript runs on node)", ok)
    h.send({"type": "ping", "seq": 7})
    check(h.expect("pong")["seq"] == 7, "pong with the same seq")
    h.close()


def test_hello_required(agent):
    h = agent.connect()
    h.send({"type": "ping", "seq": 1})
    err = h.expect("error")
    check(err["code"] == "protocol_error" and "hello" in err["message"], "hello first", err)
    h.expect_closed()
    # The agent serves the next connection.
    agent.connect().hello()


def test_js_hello(agent):
    h = agent.connect()
    h.hello()
    r = h.run('console.log("hello from js"); console.error("to stderr"); 6 * 7', "javascript")
    expect_ok(r, 42, "hello from js\n")
    check(r.stderr == "to stderr\n", "stderr", r.summary())


def test_python_hello(agent):
    h = agent.connect()
    h.hello()
    r = h.run('import sys\nprint("hello from python")\nprint("err", file=sys.stderr)\n6 * 7',
              "python")
    expect_ok(r, 42, "hello from python\n")
    check(r.stderr == "err\n", "stderr", r.summary())


def test_replay(agent):
    """Through the agent: the execute's seed reaches the runner (the same seed draws alike),
    its clock log too (a replay), and the runner's clock log, verdict and divergence come back
    in the done; a done the agent makes up (an exit) is not replayable."""
    seed = base64.b64encode(bytes(range(32))).decode()
    h = agent.connect()
    h.hello()
    for language, code in [("javascript", "[Math.random(), Date.now()]"),
                           ("python", "import random, time\n[random.random(), time.time()]")]:
        a = h.run(code, language, seed=seed)
        check("clock_log" in a.done, f"{language}: a clock log", a.summary())
        b = h.run(code, language, seed=seed, clock_log=a.done["clock_log"])
        check(a.done["result"] == b.done["result"] and a.done["replayable"] is True and
              len(a.done["clock_log"]) == 1, f"{language}: replayed through the agent",
              f"{a.summary()}\n{b.summary()}")
        c = h.run(code, language, seed=seed, clock_log=[])
        check(c.done["error"]["code"] == "replay_divergence", f"{language}: a divergence",
              c.summary())
        # A read before an output goes out in a replay_log, forwarded under our id; the done
        # has the rest; both together replay the output.
        shown = ("const t = Date.now();\nconsole.log(t);\nDate.now() - t"
                 if language == "javascript"
                 else "import time\nt = time.time()\nprint(t)\ntime.time() - t")
        e = h.run(shown, language, seed=seed)
        clock = [v for m in e.logs for v in m.get("clock", [])]
        check(len(clock) == 1 and all(m["id"] == e.id for m in e.logs) and
              len(e.done["clock_log"]) == 1, f"{language}: the read before the output streamed",
              f"{e.summary()} {e.logs}")
        f = h.run(shown, language, seed=seed, clock_log=clock + e.done["clock_log"])
        check(f.stdout == e.stdout and f.done["result"] == e.done["result"],
              f"{language}: the streamed log replays", f"{e.summary()}\n{f.summary()}")
        exit_code = "process.exit(0)" if language == "javascript" else "import sys\nsys.exit(0)"
        d = h.run(exit_code, language, seed=seed)
        check(d.done["status"] == "ok" and "replayable" not in d.done and
              "clock_log" not in d.done, f"{language}: an exit has no replay members",
              d.summary())


def test_last_expression(agent):
    h = agent.connect()
    h.hello()
    expect_ok(h.run('const a = [1, 2];\n({list: a, s: "x", n: null})', "javascript"),
              {"list": [1, 2], "s": "x", "n": None})
    expect_ok(h.run('a = [1, 2]\n{"list": a, "t": (1, "y"), "n": None}', "python"),
              {"list": [1, 2], "t": [1, "y"], "n": None})
    # No expression last: no result.
    expect_ok(h.run("let x = 1;", "javascript"), ...)
    check("result" not in h.run("x = 1", "python").done, "no result without an expression")
    r = h.run("undefined", "javascript")
    check("result" not in r.done, "undefined is no result", r.summary())


def test_entry(agent):
    h = agent.connect()
    h.hello()
    code = "function main(a, b) { return {sum: a + b}; }\nasync function later(x) { return x; }"
    expect_ok(h.run(code, "javascript", entry="main", args=[2, 3]), {"sum": 5})
    expect_ok(h.run(code, "javascript", entry="later", args=["v"]), "v")
    r = h.run(code, "javascript", entry="missing", args=[])
    expect_error(r, "validation_error", "EntryNotFound")
    code = "def main(a, b):\n    return {'sum': a + b}\nasync def later(x):\n    return x\n"
    expect_ok(h.run(code, "python", entry="main", args=[2, 3]), {"sum": 5})
    expect_ok(h.run(code, "python", entry="later", args=["v"]), "v")
    expect_error(h.run(code, "python", entry="missing"), "validation_error", "EntryNotFound")
    expect_ok(h.run(code, "python", entry="main", args=[2], kwargs={"b": 3}), {"sum": 5})
    expect_error(h.run(code, "python", entry="main", args=[2]), "validation_error", "TypeError")
    expect_error(h.run(code, "javascript", entry="main", args=[2], kwargs={"b": 3}),
                 "validation_error", "TypeError")


def test_top_level_await(agent):
    h = agent.connect()
    h.hello()
    code = ("const wait = (ms) => new Promise((r) => setTimeout(r, ms));\n"
            "await wait(10);\nconst os = await import('node:os');\n"
            "typeof os.cpus + ':' + (await Promise.resolve(5))")
    expect_ok(h.run(code, "javascript"), "function:5")
    code = "import asyncio\nawait asyncio.sleep(0.01)\nasync def f():\n    return 5\nawait f()"
    expect_ok(h.run(code, "python"), 5)
    # asyncio.run() in code without top-level await still works (no loop is running).
    code = "import asyncio\nasync def f():\n    return 6\nasyncio.run(f())"
    expect_ok(h.run(code, "python"), 6)


def test_js_import(agent):
    h = agent.connect()
    h.hello()
    code = ("import os from 'node:os';\nimport { join as j } from 'node:path';\n"
            "import * as fs from 'node:fs';\nimport p, * as ns from 'node:path';\n"
            "import 'node:util';\nconst req = require('node:path');\n"
            "[typeof os.cpus, j('a', 'b'), typeof fs.readFileSync, req.sep, p.sep, ns.sep,\n"
            " new Error('here').stack.split('\\n')[1].trim()]")
    expect_ok(h.run(code, "javascript"),
              ["function", "a/b", "function", "/", "/", "/", "at main.js:8:2"])


def test_exception(agent):
    h = agent.connect()
    h.hello()
    r = h.run('console.log("before");\nfunction f() { throw new TypeError("boom here"); }\nf()',
              "javascript")
    expect_error(r, "runtime_error", "TypeError")
    check(r.error["message"] == "boom here", "message", r.summary())
    check("main.js:2" in r.error.get("stack", ""), "stack points at line 2", r.summary())
    check("runner" not in r.error["stack"], "no runner frames in the stack", r.summary())
    check(r.stdout == "before\n" and r.done["exit_code"] == 1, "output and exit 1", r.summary())
    r = h.run("def f():\n    return 1 / 0\nf()", "python")
    expect_error(r, "runtime_error", "ZeroDivisionError")
    check('File "main.py", line 2, in f' in r.error.get("stack", ""), "traceback", r.summary())
    check("return 1 / 0" in r.error["stack"], "source line in the traceback", r.summary())
    check("runner.py" not in r.error["stack"], "no runner frames", r.summary())
    r = h.run("class E(Exception):\n    def __str__(self):\n        raise ValueError()\n"
              "raise E()", "python")
    expect_error(r, "runtime_error", "E")
    r = h.run('throw "a string"', "javascript")
    expect_error(r, "runtime_error", "string")
    r = h.run("Promise.reject(new RangeError('late')); 1", "javascript")
    expect_error(r, "runtime_error", "RangeError")


def test_never_settles(agent):
    """JavaScript that awaits what can never settle ends with an error, not a hang; before and
    after a tool call (which opens the runner's event-loop channel, runner.mjs); an exception
    thrown later, in a callback, ends it with that exception."""
    h = agent.connect()
    h.hello()
    for code, tools in [("await new Promise(() => {})", None),
                        ("await tools.calc.add({a: 1, b: 2});\nawait new Promise(() => {})",
                         add_tool())]:
        r = h.run(code, "javascript", on_tool_call=calc, tools=tools or [])
        expect_error(r, "runtime_error", "Error")
        check("can never settle" in r.error["message"], "message", r.summary())
    r = h.run("setTimeout(() => { throw new RangeError('later'); }, 10);\n"
              "await new Promise(() => {})", "javascript")
    expect_error(r, "runtime_error", "RangeError")
    check(r.error["message"] == "later", "the callback's exception", r.summary())


def test_syntax_error(agent):
    h = agent.connect()
    h.hello()
    r = h.run("let x = ;", "javascript")
    expect_error(r, "runtime_error", "SyntaxError")
    check("main.js:1" in r.error.get("stack", ""), "location", r.summary())
    r = h.run("x = (\n", "python")
    expect_error(r, "runtime_error", "SyntaxError")
    check("main.py" in r.error.get("stack", ""), "location", r.summary())
    r = h.run("export const a = 1;", "javascript")
    expect_error(r, "runtime_error", "SyntaxError")


def test_exit_code(agent):
    h = agent.connect()
    h.hello()
    r = h.run('import sys\nprint("bye")\nsys.exit(3)', "python")
    expect_error(r, "runtime_error")
    check(r.done["exit_code"] == 3 and r.stdout == "bye\n", "exit 3", r.summary())
    check("status 3" in r.error["message"], "message names the status", r.summary())
    r = h.run('console.log("bye"); process.exit(4)', "javascript")
    check(r.done["exit_code"] == 4 and r.status == "error" and r.stdout == "bye\n", "exit 4",
          r.summary())
    r = h.run("import sys\nsys.exit(0)", "python")
    expect_ok(r)
    r = h.run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "python")
    expect_error(r, "runtime_error", "SIGSEGV", status="crash")
    check(r.done["exit_code"] == -1, "exit code -1 after a signal", r.summary())


def test_output_limit(agent):
    h = agent.connect()
    h.hello()
    code = ('import sys\nchunk = "x" * 65536\nfor _ in range(64):\n    sys.stdout.write(chunk)\n'
            'sys.stdout.flush()\nprint("tail", file=sys.stderr)\n"finished"')
    r = h.run(code, "python", output_limit=100000)
    expect_ok(r, "finished")
    got = len(r.stdout) + len(r.stderr)
    check(r.done["output_truncated"] is True, "output_truncated", r.summary())
    check(got == 100000, f"exactly the limit came back (got {got})")
    check(all(len(d) <= 65536 for _, d in r.output), "chunks at most 64 KiB")
    # Under the limit: not truncated, and the connection goes on working.
    r = h.run('process.stdout.write("y".repeat(300000)); 1', "javascript")
    expect_ok(r, 1)
    check(len(r.stdout) == 300000 and r.done["output_truncated"] is False, "all output",
          r.summary())


def test_js_tools(agent):
    h = agent.connect()
    h.hello()
    code = ("const r = await tools.calc.add({a: 2, b: 40});\n"
            "const many = await Promise.all(Array.from({length: 10}, (_, i) =>"
            " tools.calc.add({a: i, b: 1})));\n"
            "console.log(r.sum, many.map(m => m.sum).join(','));\nr.sum")
    held = []

    def answer(msg):
        # Answer the parallel ones only once all ten are in, in reverse order.
        if msg["input"].get("b") != 1:
            return calc(msg)
        held.append(msg)
        if len(held) == 10:
            for m in reversed(held):
                h.send(dict({"type": "tool_result", "id": m["id"], "call_id": m["call_id"]},
                            **calc(m)))
        return None

    r = h.run(code, "javascript", on_tool_call=answer, tools=add_tool())
    expect_ok(r, 42, "42 1,2,3,4,5,6,7,8,9,10\n")
    check(len(r.calls) == 11, "11 calls", r.summary())
    ids = [c["call_id"] for c in r.calls]
    check(ids == sorted(set(ids)) and ids[0] >= 1, "call ids unique and increasing", ids)
    check(all(c["id"] == r.id and c["provider"] == "calc" for c in r.calls), "call fields")


def test_python_tools(agent):
    h = agent.connect()
    h.hello()
    code = ('r = tools.calc.add({"a": 1, "b": 2})\nprint(r["sum"])\n'
            'print(tools.calc.add(a=3, b=4)["sum"])\n'
            'import asyncio\n'
            'many = await asyncio.gather(*(tools.calc.add.aio({"a": i, "b": 1}) '
            'for i in range(10)))\n'
            'print([m["sum"] for m in many])\nr["sum"]')
    r = h.run(code, "python", on_tool_call=calc, tools=add_tool())
    expect_ok(r, 3, "3\n7\n[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n")
    check(len(r.calls) == 12, "12 calls", r.summary())


def test_tool_errors(agent):
    h = agent.connect()
    h.hello()
    code = ("const out = [];\n"
            "try { await tools.calc.fail({}); } catch (e) {\n"
            "  out.push(e.name, e.code, e.message, e instanceof ToolError, e.type); }\n"
            "try { await tools.calc.deny({}); } catch (e) {\n"
            "  out.push(e.name, e.code, e instanceof SandboxToolError); }\n"
            "try { await tools.calc.add({a: NaN}); } catch (e) { out.push(e.code); }\n"
            "out")
    r = h.run(code, "javascript", on_tool_call=calc, tools=add_tool())
    expect_ok(r, ["ToolError", "tool_error", "failed on purpose", True, "CalcError",
                  "PolicyDenied", "policy_denied", True, "serialization_error"])
    check(len(r.calls) == 2, "the NaN call never left the guest", r.summary())
    code = ("out = []\ntry:\n    tools.calc.fail({})\nexcept ToolError as e:\n"
            "    out += [type(e).__name__, e.code, str(e), e.type]\n"
            "try:\n    tools.calc.deny()\nexcept SandboxToolError as e:\n"
            "    out += [type(e).__name__, e.code, repr(e)]\n"
            "try:\n    tools.calc.nope\nexcept AttributeError as e:\n    out.append(str(e))\n"
            "out")
    r = h.run(code, "python", on_tool_call=calc, tools=add_tool())
    expect_ok(r, ["ToolError", "tool_error", "failed on purpose", "CalcError",
                  "PolicyDenied", "policy_denied",
                  "PolicyDenied(code='policy_denied', message='not allowed here')",
                  "tools.calc has no 'nope' (available: add, fail, deny)"])
    # Uncaught, a tool error ends the execution with its type.
    r = h.run("\nawait tools.calc.fail({})", "javascript", on_tool_call=calc, tools=add_tool())
    expect_error(r, "runtime_error", "ToolError")
    check(r.error["stack"].split("\n")[1].strip().startswith("at main.js:2"),
          "the stack starts at the call in the user's code", r.summary())
    r = h.run("tools.calc.fail({})", "python", on_tool_call=calc, tools=add_tool())
    expect_error(r, "runtime_error", "ToolError")
    check("sbx_tools" not in r.error["stack"] and "main.py" in r.error["stack"],
          "the traceback ends in the user's code", r.summary())


def test_calls_in_flight(agent):
    """More calls at once than SBX_TOOL_CALLS_IN_FLIGHT_MAX: the runner sends at most 64 and
    queues the rest until answers come back; every call succeeds. (The agent still refuses a
    65th from a runner that does not hold back: tests/agent/test-agent-units.c.)"""
    h = agent.connect()
    h.hello()
    for lang, code in [
            ("javascript", "const rs = await Promise.allSettled(Array.from({length: 70}, (_, i) =>"
                           " tools.calc.add({a: i, b: 0})));\n"
                           "rs.filter(r => r.status === 'rejected').map(r => r.reason.code)"),
            ("python", "import asyncio\n"
                       "async def main():\n"
                       "    rs = await asyncio.gather(*[tools.calc.add.aio({'a': i, 'b': 0})"
                       " for i in range(70)], return_exceptions=True)\n"
                       "    return [r.code for r in rs if isinstance(r, Exception)]\n"
                       "asyncio.run(main())")]:
        held, seen = [], []

        def answer(msg):
            seen.append(msg)
            if len(seen) > 64:
                return calc(msg)
            held.append(msg)
            if len(held) == 64:
                # The window is full. A runner that did not hold back would have sent the other
                # six by now, and the agent would have refused them (tool_error, never seen
                # here): give it the time to, then answer.
                time.sleep(0.5)
                for m in held:
                    h.send(dict({"type": "tool_result", "id": m["id"], "call_id": m["call_id"]},
                                **calc(m)))
            return None

        r = h.run(code, lang, on_tool_call=answer, tools=add_tool())
        expect_ok(r, [])
        check(len(r.calls) == 70, f"{lang}: all 70 calls reached the host", len(r.calls))


def test_cancel(agent):
    h = agent.connect()
    h.hello()
    exec_id = h.execute('console.log("spinning"); while (true) {}', "javascript")
    h.expect("started")
    out = h.expect("output")
    check(base64.b64decode(out["data"]) == b"spinning\n", "output before the cancel")
    start = time.monotonic()
    h.send({"type": "cancel", "id": exec_id})
    done = h.expect("done")
    check(done["status"] == "cancelled", "status cancelled", done)
    check(time.monotonic() - start < 5, "cancelled promptly")
    agent.wait_no_children()
    # A cancel for an execution that is over is ignored; the connection goes on.
    h.send({"type": "cancel", "id": exec_id})
    expect_ok(h.run("1", "python"), 1)


def test_malformed_frame(agent):
    h = agent.connect()
    h.hello()
    h.send_raw(struct.pack(">I", 9) + b"not json!")
    err = h.expect("error")
    check(err["code"] == "protocol_error", "protocol_error", err)
    h.expect_closed()
    # Oversized frame header: refused before anything is allocated.
    h = agent.connect()
    h.hello()
    h.send_raw(struct.pack(">I", 0xFFFFFFF0))
    check(h.expect("error")["code"] == "protocol_error", "oversized frame refused")
    h.expect_closed()
    # A bad message during an execution kills it.
    h = agent.connect()
    h.hello()
    h.execute("while (true) {}", "javascript")
    h.expect("started")
    h.send({"type": "execute", "id": "bad id!", "language": "python", "code": "", "tools": []})
    check(h.expect("error")["code"] == "protocol_error", "invalid id refused")
    h.expect_closed()
    agent.wait_no_children()
    agent.connect().hello()


def test_serialization_error(agent):
    h = agent.connect()
    h.hello()
    for code, lang in [("NaN", "javascript"), ("({f: () => 1})", "javascript"),
                       ("Symbol('s')", "javascript"),
                       ("const a = {}; a.self = a; a", "javascript"),
                       ("float('nan')", "python"), ("{1: 'int key'}", "python"),
                       ("object()", "python"), ("a = []\na.append(a)\na", "python"),
                       ("'nul\\0'", "python")]:
        r = h.run(code, lang)
        expect_error(r, "serialization_error")
    r = h.run("let v = 1; for (let i = 0; i < 40; i++) v = [v]; v", "javascript")
    expect_error(r, "serialization_error")
    check("nested deeper" in r.error["message"], "depth message", r.summary())
    for code, lang in [("'x'.repeat(5 * 1024 * 1024)", "javascript"),
                       ("'x' * (5 * 1024 * 1024)", "python")]:
        r = h.run(code, lang)
        expect_error(r, "serialization_error")
        check("too large" in r.error["message"], "size message", r.summary())
    # Just under the frame limit is fine.
    r = h.run("'y'.repeat(4 * 1024 * 1024 - 200)", "javascript")
    expect_ok(r)
    check(len(r.done["result"]) == 4 * 1024 * 1024 - 200, "a 4 MiB result arrives")


def test_exact_numbers(agent):
    """Numbers cross the whole way (runner, agent, host) as their text: -0, BigInt, ints of any
    size, shortest doubles, in tool inputs, tool results, args and results; each language reads
    a literal as it would anywhere (JS: 1234567890123456789 is 1234567890123456800). A tool
    result with an int of more digits than Python converts fails that call only.
    (runner_test.py tests the runners alone.) The texts are compared, not re-parsed: Python's
    json here would read -0 as 0 and refuse 5000 digits."""
    h = agent.connect()
    h.hello()
    big = "1" + "0" * 4999

    def run_raw(code, language, answer, **fields):
        exec_id = h.execute(code, language, tools=add_tool(("echo",)), **fields)
        calls = []
        while True:
            text = h.recv_text()
            check(text is not None, "connection closed before done")
            msg = json.loads(text, parse_int=str)
            if msg["type"] == "tool_call":
                calls.append(text)
                reply = (f'{{"type":"tool_result","id":"{exec_id}","call_id":{msg["call_id"]},'
                         f'"ok":true,"result":{answer(msg)}}}').encode()
                h.send_raw(struct.pack(">I", len(reply)) + reply)
            elif msg["type"] == "done":
                check(msg["status"] == "ok", "status ok", text[:3000])
                return text, calls
            else:
                check(msg["type"] in ("started", "output"), "an expected message", text[:3000])

    code = ("const r = await tools.calc.echo({z: -0, b: 1234567890123456789n, d: 0.1 + 0.2,"
            " t: 5e-324});\n"
            "[Object.is(r.z, -0), r.b, r.inf === Infinity, -0, 10n ** 30n, r.d]")
    done, calls = run_raw(code, "javascript", lambda m: '{"z":-0,"b":1234567890123456789,'
                          '"inf":1e400,"d":0.30000000000000004}')
    check(len(calls) == 1 and '"input":{"z":-0,"b":1234567890123456789,'
          '"d":0.30000000000000004,"t":5e-324}' in calls[0], "the JS input's text", calls)
    check('"result":[true,1234567890123456800,true,-0,1000000000000000000000000000000,'
          '0.30000000000000004]' in done, "the JS result's text", done)
    code = ("import math\nr = tools.calc.echo({'z': -0.0, 'b': 10**4000})\n"
            "out = [math.copysign(1, r['z']), r['b'] == 10**4000]\n"
            "try:\n    tools.calc.echo({'big': True})\n"
            "except ValueError as e:\n    out.append(str(e))\n"
            "out + [-0.0, 2**70]")
    done, calls = run_raw(code, "python", lambda m: f'{{"n":{big}}}' if "big" in m["input"]
                          else f'{{"z":-0.0,"b":1{"0" * 4000}}}')
    check(len(calls) == 2 and f'"input":{{"z":-0.0,"b":1{"0" * 4000}}}' in calls[0],
          "the Python input's text", [c[:300] for c in calls])
    message = ("tools.calc.echo: result['n'] is an integer of 5000 digits: Python converts "
               "integers of at most 4300 digits to and from text (sys.get_int_max_str_digits());"
               " raise the limit with sys.set_int_max_str_digits(n), or 0 for none")
    check(f'"result":[-1.0,true,{json.dumps(message)},-0.0,1180591620717411303424]' in done,
          "the Python result's text: the big int failed its call only", done[:3000])
    # Args: the host's text, read by each language.
    done, _ = run_raw("function main(a, b) { return [a, b]; }", "javascript", None,
                      entry="main", args=[-0.0, 2**70])
    check('"result":[-0,1.1805916207174113e+21]' in done, "JS args", done)
    done, _ = run_raw("def main(a, b):\n    return [a, b]", "python", None,
                      entry="main", args=[-0.0, 2**70])
    check('"result":[-0.0,1180591620717411303424]' in done, "Python args", done)


def test_second_connection(agent):
    h = agent.connect()
    h.hello()
    other = agent.connect()
    check(other.expect("error")["code"] == "protocol_error", "second connection refused")
    other.expect_closed()
    expect_ok(h.run("1 + 1", "javascript"), 2)


def test_silent_connection_replaced(agent):
    """A host that gave up on a connection before its hello (a probe that timed out) connects
    again: the new connection is served, the silent one closed. With the bridge after a restore
    on a loaded host the guest may accept the abandoned one before the new one, and its reset
    comes later (tests/hostile, guest-image/agent/conn.c)."""
    silent = agent.connect()
    time.sleep(0.3)  # accepted: the agent waits for its hello
    h = agent.connect()
    h.hello()
    silent.expect_closed()
    expect_ok(h.run("1 + 1", "javascript"), 2)
    # One that said hello is not replaced: the newcomer is refused.
    other = agent.connect()
    check(other.expect("error")["code"] == "protocol_error", "a third connection refused")
    other.expect_closed()
    expect_ok(h.run("2 + 2", "javascript"), 4)


def test_disconnect(agent):
    h = agent.connect()
    h.hello()
    h.execute("import time\ntime.sleep(1000)", "python")
    h.expect("started")
    h.close()
    agent.wait_no_children()
    h = agent.connect()
    h.hello()
    expect_ok(h.run("2", "python"), 2)


def test_background_children(agent):
    """A program that leaves a child behind: done still comes, and the child is killed."""
    h = agent.connect()
    h.hello()
    code = "import subprocess\nsubprocess.Popen(['sleep', '1000'])\n'left'"
    expect_ok(h.run(code, "python"), "left")
    agent.wait_no_children()
    code = ("const { spawn } = require('node:child_process');\n"
            "spawn('sleep', ['1000'], { stdio: 'inherit' }).unref();\n'left'")
    start = time.monotonic()
    expect_ok(h.run(code, "javascript"), "left")
    check(time.monotonic() - start < 10, "done did not wait for the child's pipes")
    agent.wait_no_children()


def test_stray_results(agent):
    """tool_result for unknown calls or executions is ignored (it may cross a done)."""
    h = agent.connect()
    h.hello()
    h.send({"type": "tool_result", "id": "nope", "call_id": 1, "ok": True, "result": 1})
    code = "const a = await tools.calc.add({a: 1, b: 1}); a.sum"
    seen = []

    def answer(msg):
        seen.append(msg)
        h.send({"type": "tool_result", "id": msg["id"], "call_id": msg["call_id"] + 100,
                "ok": True, "result": {"sum": -1}})
        return calc(msg)

    r = h.run(code, "javascript", on_tool_call=answer, tools=add_tool())
    expect_ok(r, 2)
    h.send({"type": "ping", "seq": 3})
    check(h.expect("pong")["seq"] == 3, "still alive")


def test_missing_runtime(agent):
    """A runtime that is not there is not announced, and executing it is refused."""
    other = Agent(agent.binary, agent.runners, ["--python", "/nonexistent/python3"])
    try:
        h = other.connect()
        check(h.hello()["languages"] == ["javascript", "typescript"],
              "only node's languages announced")
        h.execute("1", "python")
        done = h.expect("done")  # no started: it never ran
        check(done["status"] == "error" and done["error"]["code"] == "validation_error",
              "refused", done)
        expect_ok(h.run("1", "javascript"), 1)
    finally:
        other.stop()


def test_hello_timeout(agent):
    h = agent.connect()
    start = time.monotonic()
    err = h.expect("error")
    took = time.monotonic() - start
    check(err["code"] == "protocol_error" and 4 < took < 8, f"error after ~5 s ({took:.1f})", err)
    h.expect_closed()


def test_fragmented(agent):
    """Frames cut into pieces of 1..7 bytes are put back together."""
    h = agent.connect()
    body = json.dumps({"type": "hello", "version": 1, "token": "t",
                       "entropy": base64.b64encode(os.urandom(32)).decode(), "time_us": 1})
    data = struct.pack(">I", len(body)) + body.encode()
    body = json.dumps({"type": "execute", "id": "frag", "language": "python", "code": "40 + 2",
                       "tools": []})
    data += struct.pack(">I", len(body)) + body.encode()
    i = 0
    while i < len(data):
        n = 1 + i % 7
        h.send_raw(data[i:i + n])
        i += n
        time.sleep(0.001)
    h.expect("hello_ok")
    h.expect("started")
    check(h.expect("done")["result"] == 42, "result")


def test_backpressure(agent):
    """A host that does not read: the agent stops reading the pipes, its memory stays bounded,
    and everything arrives once the host reads again."""
    h = agent.connect()
    h.hello()
    total = 48 << 20
    code = ('import sys\nchunk = b"z" * (1 << 20)\nfor _ in range(48):\n'
            '    sys.stdout.buffer.write(chunk)\nsys.stdout.flush()\n"end"')
    exec_id = h.execute(code, "python", output_limit=total)
    time.sleep(3)  # not reading: the agent's queue and the pipe fill up, python blocks
    with open(f"/proc/{agent.proc.pid}/maps") as f:
        # ASan's shadow memory and quarantine make RSS meaningless there; the normal build
        # (same test) checks the bound.
        asan = "libasan" in f.read()
    with open(f"/proc/{agent.proc.pid}/status") as f:
        rss = [int(l.split()[1]) for l in f if l.startswith("VmRSS:")][0]
    check(asan or rss < 16 * 1024, f"agent RSS {rss} KiB while the host does not read")
    got = 0
    while True:
        msg = h.recv()
        check(msg is not None and msg["id"] == exec_id, "messages of the execution", repr(msg))
        if msg["type"] == "output":
            got += len(base64.b64decode(msg["data"]))
        elif msg["type"] == "done":
            break
    check(got == total and msg["result"] == "end" and not msg["output_truncated"],
          f"all {total} bytes ({got}) then done", msg)
    with open(f"/proc/{agent.proc.pid}/status") as f:
        hwm = [int(l.split()[1]) for l in f if l.startswith("VmHWM:")][0]
    check(asan or hwm < 24 * 1024, f"agent peak RSS {hwm} KiB")


def test_ping_flood(agent):
    """A host that writes without reading: the agent stops reading it once 1 MiB of pongs
    wait, and resumes (including messages it had already read) once the host reads."""
    h = agent.connect()
    h.hello()
    n = 60000  # ~1.7 MiB of pongs, more than the agent queues
    frames = b"".join(struct.pack(">I", len(b)) + b for b in (
        json.dumps({"type": "ping", "seq": i}).encode() for i in range(n)))
    import threading
    writer = threading.Thread(target=h.send_raw, args=(frames,))
    writer.start()
    time.sleep(1)
    for i in range(n):
        check(h.expect("pong")["seq"] == i, f"pong {i} in order")
    writer.join()
    expect_ok(h.run("1", "python"), 1)


def test_call_flood(agent):
    """Large tool calls faster than the host reads: the agent stops reading the runner and
    resumes, frames it had already read included, when the host catches up."""
    h = agent.connect()
    h.hello()
    code = ("const big = 'b'.repeat(100000);\n"
            "const rs = await Promise.all(Array.from({length: 60}, (_, i) =>"
            " tools.calc.add({a: i, b: 1, pad: big})));\n"
            "rs.reduce((s, r) => s + r.sum, 0)")
    exec_id = h.execute(code, "javascript", tools=add_tool())
    time.sleep(1)  # let the calls pile up in the agent
    calls = 0
    while True:
        msg = h.recv()
        check(msg is not None and msg["id"] == exec_id, "messages of the execution", repr(msg))
        if msg["type"] == "tool_call":
            calls += 1
            h.send(dict({"type": "tool_result", "id": exec_id, "call_id": msg["call_id"]},
                        **calc(msg)))
        elif msg["type"] == "done":
            break
    check(calls == 60 and msg["status"] == "ok" and msg["result"] == sum(range(1, 61)),
          f"60 calls ({calls}) and the sum", msg)


def test_oversized_forward(agent):
    """A runner message of exactly 4 MiB grows when the agent re-encodes it (a longer id, more
    digits of duration): the execution gets an error, the host connection lives on."""
    h = agent.connect()
    h.hello()
    frame = ("import json, os, struct, time\n"
             "def frame(head, key):\n"
             "    text = json.dumps(head, separators=(',', ':'))[:-1] + ',\"' + key + '\":\"'\n"
             "    pad = 4 * 1024 * 1024 - len(text) - 2\n"
             "    body = (text + 'p' * pad + '\"}').encode()\n"
             "    assert len(body) == 4 * 1024 * 1024\n"
             "    os.write(3, struct.pack('>I', len(body)) + body)\n")
    code = frame + ("frame({'type': 'tool_call', 'id': 'x', 'call_id': 1000, 'provider': 'calc',"
                    " 'tool': 'add'}, 'input')\ntime.sleep(0.5)\nprint('alive')\n3")
    r = h.run(code, "python", on_tool_call=calc, tools=add_tool())
    expect_ok(r, 3, "alive\n")
    check(len(r.calls) == 0, "the call never reached the host", r.summary())
    code = frame + ("frame({'type': 'done', 'id': 'x', 'status': 'ok', 'exit_code': 0,"
                    " 'duration_ms': 0, 'output_truncated': False}, 'result')\n"
                    "time.sleep(0.2)\nos._exit(0)")
    r = h.run(code, "python")
    expect_error(r, "serialization_error")
    expect_ok(h.run("1", "javascript"), 1)


def test_refusal_after_exit(agent):
    """A call the agent refuses (the 65th in flight) when the runner has already exited: the
    refusal cannot be written, but the runner's done (with its result) is still in the socket
    and must be read. The agent is stopped while the runner writes and exits, so it meets the
    calls only after the exit (found under ASan, where a 4 MiB frame took that long)."""
    h = agent.connect()
    h.hello()
    code = ("import json, os, struct, time\n"
            "time.sleep(0.3)\n"
            "for i in range(65):\n"
            "    body = json.dumps({'type': 'tool_call', 'id': 'x', 'call_id': 1000 + i,"
            " 'provider': 'calc', 'tool': 'add', 'input': {'a': i, 'b': 1}}).encode()\n"
            "    os.write(3, struct.pack('>I', len(body)) + body)\n"
            "print('wrote')\n"
            "3")
    exec_id = h.execute(code, "python", tools=add_tool())
    started = h.expect("started")
    check(started["id"] == exec_id, "started", repr(started))
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(2)  # the runner writes its 65 calls and its done (~10 KiB) and exits
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    calls, done, out = 0, None, b""
    while done is None:
        msg = h.recv()
        check(msg is not None, "connection closed before done")
        if msg["type"] == "tool_call":
            calls += 1  # never answered: the runner is gone
        elif msg["type"] == "output":
            out += base64.b64decode(msg["data"])
        elif msg["type"] == "done":
            done = msg
    check(done.get("status") == "ok" and done.get("result") == 3,
          "the runner's done and result survive a refusal it could not take", repr(done))
    check(out == b"wrote\n", "its output", repr(out))
    check(calls == 64, f"64 calls forwarded, the 65th refused (got {calls})")
    expect_ok(h.run("1", "javascript"), 1)


def test_runner_violation(agent):
    """The runner's channel is the user's code's too: what breaks the protocol there fails the
    execution (protocol_error), never the agent or the host connection."""
    h = agent.connect()
    h.hello()
    r = h.run("require('fs').writeSync(3, Buffer.from([0, 0, 0, 2, 123, 125])); "
              "await new Promise(r => setTimeout(r, 5000))", "javascript")
    expect_error(r, "protocol_error")
    # Data frames are the host connection's only: a runner's is a frame over the limit, and a
    # message announcing one is refused.
    r = h.run("import os, time\nos.write(3, bytes([0x80, 0, 0, 3]) + b'abc')\ntime.sleep(5)",
              "python")
    expect_error(r, "protocol_error")
    fake_result = json.dumps({"type": "file_result", "seq": 1, "ok": True,
                              "data_len": 3}).encode()
    code = ("import os, struct, time\n"
            f"body = {fake_result!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body + bytes([0x80, 0, 0, 3]) + b'abc')\n"
            "time.sleep(5)")
    r = h.run(code, "python")
    expect_error(r, "protocol_error")
    check("data" in r.error.get("message", ""), "the data frame named", r.summary())
    fake = json.dumps({"type": "done", "id": "x", "status": "cancelled", "exit_code": 0,
                       "duration_ms": 0, "output_truncated": False}).encode()
    code = ("import os, struct, time\n"
            f"body = {fake!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\ntime.sleep(5)")
    expect_error(h.run(code, "python"), "protocol_error")
    # A replay_log is forwarded under our id; a malformed one fails the execution.
    log = json.dumps({"type": "replay_log", "id": "other", "clock": [7], "events": [2]}).encode()
    code = ("import os, struct\n"
            f"body = {log!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\n1")
    r = h.run(code, "python")
    check(r.status == "ok" and any(m["id"] == r.id and m.get("clock") == [7] and
                                   m.get("events") == [2] for m in r.logs),
          "a replay_log forwarded as ours", f"{r.summary()} {r.logs}")
    bad = json.dumps({"type": "replay_log", "id": "x", "events": [-1]}).encode()
    code = ("import os, struct, time\n"
            f"body = {bad!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\ntime.sleep(5)")
    expect_error(h.run(code, "python"), "protocol_error")
    # A call id used twice.
    call = json.dumps({"type": "tool_call", "id": "x", "call_id": 5, "provider": "calc",
                       "tool": "add", "input": {"a": 1, "b": 1}}).encode()
    code = ("import os, struct, time\n"
            f"body = {call!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\ntime.sleep(5)")
    r = h.run(code, "python", tools=add_tool())
    expect_error(r, "protocol_error")
    check(len(r.calls) == 1 and r.calls[0]["id"] == r.id, "the first call went out, as ours",
          r.summary())
    # A fake done with status ok is the runner's word: accepted (with its exit code: done is
    # sent on the runner's done, not its exit), and the process is killed.
    ok = json.dumps({"type": "done", "id": "x", "status": "ok", "result": 7, "exit_code": 0,
                     "duration_ms": 0, "output_truncated": False}).encode()
    code = ("import os, struct, time\n"
            f"body = {ok!r}\n"
            "os.write(3, struct.pack('>I', len(body)) + body)\ntime.sleep(1000)")
    start = time.monotonic()
    r = h.run(code, "python")
    check(r.status == "ok" and r.done["result"] == 7 and r.done["exit_code"] == 0,
          "reported, then killed", r.summary())
    check(time.monotonic() - start < 10, "killed after the grace period")


def test_escaped_child(agent):
    """A child that left the process group (setsid) is found and killed all the same."""
    h = agent.connect()
    h.hello()
    code = ("import subprocess\n"
            "subprocess.Popen(['sleep', '1000'], start_new_session=True)\n'escaped'")
    expect_ok(h.run(code, "python"), "escaped")
    agent.wait_no_children()


def test_disconnect_during_call(agent):
    h = agent.connect()
    h.hello()
    h.execute("await tools.calc.add({a: 1, b: 2})", "javascript", tools=add_tool())
    h.expect("started")
    h.expect("tool_call")
    h.close()
    agent.wait_no_children()
    h = agent.connect()
    h.hello()
    expect_ok(h.run("3", "javascript"), 3)


def test_run_as(agent):
    """--run-as: code runs as that user (uid = gid, no groups), and whatever it leaves, even
    outside its process group, is killed by uid. Needs root; uses a uid nobody else has."""
    uid = 64321
    if os.geteuid() != 0:
        raise Skip("needs root")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                raise Skip(f"uid {uid} is in use here")
        except FileNotFoundError:
            pass
    other = Agent(agent.binary, agent.runners, ["--run-as", str(uid)])
    try:
        h = other.connect()
        h.hello()
        st = os.stat(other.workspace)
        check(st.st_uid == uid and st.st_gid == uid and st.st_mode & 0o777 == 0o700,
              "the workspace is the user's, 0700", oct(st.st_mode))
        # A session's runner is spared by the sweep that ends another execution.
        expect_ok(h.run("let n = 1; process.getuid()", "javascript", keep=True), uid)
        code = ("import os, subprocess\n"
                "subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
                "[os.getuid(), os.getgid(), os.getgroups(), os.getcwd(), os.environ['HOME']]")
        expect_ok(h.run(code, "python"), [uid, uid, [], other.workspace, "/tmp"])
        r = h.run("++n", "javascript", keep=True)
        expect_ok(r, 2)
        check(r.done.get("kept") is True, "still kept", r.summary())
        # What the agent writes is the user's too.
        h.upload("made/by/host.txt", b"x")
        for rel, mode in (("made", 0o755), ("made/by", 0o755), ("made/by/host.txt", 0o644)):
            st = os.lstat(os.path.join(other.workspace, rel))
            check(st.st_uid == uid and st.st_gid == uid and st.st_mode & 0o777 == mode,
                  f"{rel} is the user's, {oct(mode)}", oct(st.st_mode))
        h.close()
        other.wait_no_children()
    finally:
        other.stop()


def test_prestarted(agent):
    """One runner per language is started with the agent and takes the first execute of its
    language: no output of its own leaks in, Math.random() is the reseeded generator; the
    next execute of that language spawns a runner as before."""
    check(sorted(agent.prestarted.values()) == ["javascript", "python"],
          f"pre-started runners: {agent.prestarted}")
    h = agent.connect()
    h.hello()
    js = ("console.log('hi'); const xs = Array.from({length: 1000}, Math.random);\n"
          "[process.pid, Math.random.name, Math.random.length, /native code/.test(String("
          "Math.random)), xs.every((x) => x >= 0 && x < 1), new Set(xs).size]")
    r = h.run(js, "javascript")
    expect_ok(r, r.done.get("result"))
    pid, name, length, native, in_range, distinct = r.done["result"]
    check(agent.prestarted.get(pid) == "javascript", f"js ran in {pid}, not pre-started")
    check(r.stdout == "hi\n" and r.stderr == "", "output of the pre-started runner", r.summary())
    check((name, length, native, in_range, distinct) == ("random", 0, False, True, 1000),
          "Math.random() is the runner's reseeded generator", r.summary())
    r = h.run("import os, random\nprint('hi')\n[os.getpid(), random.random() < 1]", "python")
    check(r.status == "ok" and agent.prestarted.get(r.done["result"][0]) == "python",
          "python ran in the pre-started runner", r.summary())
    check(r.stdout == "hi\n" and r.stderr == "", "output of the pre-started runner", r.summary())
    r = h.run("process.pid", "javascript")
    check(r.status == "ok" and r.done["result"] not in agent.prestarted,
          "the second execute spawns a runner", r.summary())


def test_rewarm(agent):
    """A hello with warm_up (a pooled VM after a restore) makes the warm runners warm up again
    (a second ping) and is answered only once both are done; a plain hello does not. The
    warm-up writes to the runners' real stdout and stderr: none of it reaches the executions
    that follow, which still run in the pre-started runners; the execute's clock and entropy
    are accepted."""
    h = agent.connect()
    h.hello()  # hello_ok comes once both runners are warm
    h.close()
    time.sleep(0.05)
    h = agent.connect()
    h.hello()  # no warm_up: no warm-up
    time.sleep(0.3)
    check("warm again" not in agent.read_log(), "a plain hello made the runners warm up")
    h.close()
    time.sleep(0.05)
    h = agent.connect()
    h.hello(warm_up=True)
    log = agent.read_log()
    for lang in ("javascript", "python"):
        check(f"pre-started {lang} runner: warm again" in log,
              f"hello_ok before the {lang} runner's warm-up was over", log)
    r = h.run("console.log('a'); process.pid", "javascript",
              time_us=int(time.time() * 1e6), entropy=base64.b64encode(os.urandom(64)).decode())
    expect_ok(r, r.done.get("result"), stdout="a\n")
    check(agent.prestarted.get(r.done["result"]) == "javascript", "pre-started runner used")
    r = h.run("print('b')\nimport os\nos.getpid()", "python")
    expect_ok(r, r.done.get("result"), stdout="b\n")
    check(agent.prestarted.get(r.done["result"]) == "python", "pre-started runner used")
    check(r.stderr == "", "nothing on stderr", r.summary())


def test_no_prestart(agent):
    """--no-prestart: no runner before an execute; executions spawn theirs."""
    other = Agent(agent.binary, agent.runners, ["--no-prestart"])
    try:
        check(not other.prestarted, f"runners started: {other.prestarted}")
        h = other.connect()
        h.hello()
        expect_ok(h.run("6 * 7", "javascript"), 42)
        expect_ok(h.run("6 * 7", "python"), 42)
        other.wait_no_children()
    finally:
        other.stop()


def test_hello_warm_wait(agent):
    """hello_ok waits for the pre-started runners at most 7 s, or as long as the hello's
    warm_wait_ms says (the snapshot maker's: a snapshot must hold warm runners). A node that
    takes 9 s to start (a wrapper that sleeps first) stands for a slow boot."""
    slow = os.path.join(agent.dir, "slow-node")
    with open(slow, "w") as f:
        f.write(f"#!/bin/sh\nsleep 9\nexec {NODE} \"$@\"\n")
    os.chmod(slow, 0o755)
    for wait_ms in (None, 60000):
        other = Agent(agent.binary, agent.runners, node=slow)
        try:
            h = other.connect()
            h.sock.settimeout(60)
            start = time.monotonic()
            h.hello(**({"warm_wait_ms": wait_ms} if wait_ms else {}))
            took = time.monotonic() - start
            gave_up = "not warm after 7000 ms" in other.read_log()
            if wait_ms:
                check(took >= 8 and not gave_up, f"waited for the runners ({took:.1f} s)",
                      other.read_log())
            else:
                check(6.5 <= took < 8.5 and gave_up, f"gave up after 7 s ({took:.1f} s)",
                      other.read_log())
            expect_ok(h.run("6 * 7", "javascript"), 42)
        finally:
            other.stop()


def typescript_node():
    """A node that strips types: SBX_TEST_NODE's, else the image build's (build-image's cache)."""
    probe = "process.exit(typeof require('node:module').stripTypeScriptTypes === 'function' ? 0 : 1)"
    for node in [NODE] + sorted(glob.glob(os.path.join(TOP, "build", "image-cache", "node", "*",
                                                       "node", "node"))):
        try:
            if subprocess.run([node, "-e", probe], timeout=60).returncode == 0:
                return node
        except OSError:
            pass
    raise Skip("no node with type stripping (22.13+): run scripts/build, or set SBX_TEST_NODE")


TS_CODE = """interface Sum { sum: number }
const add = (a: number, b: number): Promise<Sum> => tools.calc.add({ a, b }) as Promise<Sum>;
function twice<T>(x: T): [T, T] { return [x, x]; }
const r: Sum = await add(2, 40);
console.log(twice<string>('ts').join(' '));
({ sum: r.sum satisfies number, pid: process.pid as number })"""


def test_typescript(agent):
    """language "typescript": the pre-started node runner strips the types and runs the code
    (its warm-up loaded the stripper), with tool calls, and no ExperimentalWarning on stderr;
    an enum is a SyntaxError that names it; a runner spawned for a TypeScript execute loads the
    stripper itself."""
    other = Agent(agent.binary, agent.runners, node=typescript_node())
    try:
        h = other.connect()
        check("typescript" in h.hello()["languages"], "typescript announced")
        r = h.run(TS_CODE, "typescript", on_tool_call=calc, tools=add_tool())
        expect_ok(r, r.done.get("result"), stdout="ts ts\n")
        check(r.done["result"]["sum"] == 42, "the tool's result", r.summary())
        check(other.prestarted.get(r.done["result"]["pid"]) == "javascript",
              "ran in the pre-started node runner", r.summary())
        check(r.stderr == "", "nothing on stderr", r.summary())
        r = h.run("const x: number = 1;\nenum E { A }\nx", "typescript")
        expect_error(r, "runtime_error", "SyntaxError")
        check("TypeScript enum is not supported" in r.error["message"] and
              r.error.get("stack", "").startswith("main.ts:2\n"), "the enum named, at its line",
              r.summary())
        check(r.stderr == "", "nothing on stderr", r.summary())
        r = h.run("const t: string = 'spawned'; t", "typescript")
        expect_ok(r, "spawned")
        check(r.stderr == "", "nothing on stderr (spawned runner)", r.summary())
        other.wait_no_children()
    finally:
        other.stop()


# ---- sessions (execute.keep) ------------------------------------------------------------------

def expect_kept(r, result=..., kept=True):
    expect_ok(r, result)
    check(r.done.get("kept", False) is kept, f"kept {kept}", r.summary())


def test_session_js(agent):
    """A session in JavaScript: the runner (the pre-started one) stays after each done, with
    its globals: a variable, an import, a function, a class, re-declared let; another
    language's execution meanwhile spares it; a non-keep execute ends the session."""
    h = agent.connect()
    h.hello()
    r = h.run("import path from 'node:path';\nlet n = 1;\nfunction inc() { return ++n; }\n"
              "class K { static k = 'k'; }\n[process.pid, process.cwd()]", "javascript",
              keep=True)
    expect_kept(r)
    pid, cwd = r.done["result"]
    check(agent.prestarted.get(pid) == "javascript", "the pre-started runner", r.summary())
    check(cwd == agent.workspace, "cwd is the workspace", r.summary())
    expect_kept(h.run("let n = 10;\n[inc(), K.k, path.basename('/a/b.js'), process.pid]",
                      "javascript", keep=True), [11, "k", "b.js", pid])
    expect_kept(h.run("[n, typeof inc, typeof K]", "javascript", keep=True),
                [11, "function", "function"])
    expect_ok(h.run("1", "python"), 1)  # its end sweeps, sparing the kept runner
    expect_kept(h.run("", "javascript", keep=True, entry="inc"), 12)
    r = h.run("[n, process.pid]", "javascript")
    expect_kept(r, [12, pid], kept=False)
    r = h.run("[typeof n, process.pid]", "javascript", keep=True)
    expect_kept(r)
    check(r.done["result"][0] == "undefined" and r.done["result"][1] != pid,
          "a new runner, without the old state", r.summary())
    h.close()  # the session ends with its connection: wait_no_children checks it


def test_session_python(agent):
    """A session in Python: one globals dict across executes (a variable, an import, a
    function, a class), kwargs of an entry defined earlier; the same runner throughout."""
    h = agent.connect()
    h.hello()
    r = h.run("import json, os\nn = 1\ndef inc(by=1):\n    global n\n    n += by\n    return n\n"
              "class K:\n    k = 'k'\n[os.getpid(), os.getcwd()]", "python", keep=True)
    expect_kept(r)
    pid, cwd = r.done["result"]
    check(agent.prestarted.get(pid) == "python", "the pre-started runner", r.summary())
    check(cwd == agent.workspace, "cwd is the workspace", r.summary())
    expect_kept(h.run("[inc(), K.k, json.dumps([n]), os.getpid()]", "python", keep=True),
                [2, "k", "[2]", pid])
    expect_kept(h.run("", "python", keep=True, entry="inc", kwargs={"by": 10}), 12)
    expect_kept(h.run("n", "python", keep=True), 12)
    h.close()


def wait_gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}"):
        check(time.monotonic() < deadline, f"process {pid} did not end")
        time.sleep(0.02)


RUNNER_LOST = "the session's {} runner exited between executions: its state is gone"


def expect_lost(r, language):
    check(not r.started and r.status == "crash", "done crash without started", r.summary())
    check(r.error == {"code": "runtime_error", "type": "RunnerLost",
                      "message": RUNNER_LOST.format(language)}, "RunnerLost", r.summary())
    check("kept" not in r.done, "not kept", r.summary())


def test_session_runner_exits(agent):
    """A session's runner that exits during an execute: that done has no kept (the next keep
    execute starts afresh). One that exits between executes (a timer of the code; or a message
    on its channel, which ends it): the next keep execute is told (RunnerLost, once)."""
    h = agent.connect()
    h.hello()
    expect_kept(h.run("x = 1\nimport sys\nsys.exit(0)", "python", keep=True), kept=False)
    expect_kept(h.run("'x' in globals()", "python", keep=True), False)
    r = h.run("import os, threading\nthreading.Timer(0.05, lambda: os._exit(3)).start()\n"
              "os.getpid()", "python", keep=True)
    expect_kept(r)
    wait_gone(r.done["result"])
    expect_lost(h.run("1", "python", keep=True), "python")
    expect_kept(h.run("2", "python", keep=True), 2)
    r = h.run("setTimeout(() => process.exit(3), 50); process.pid", "javascript", keep=True)
    expect_kept(r)
    wait_gone(r.done["result"])
    expect_lost(h.run("1", "typescript", keep=True), "javascript")
    expect_kept(h.run("2", "javascript", keep=True), 2)
    # Anything on the channel between executes ends the runner.
    r = h.run("import json, os, struct, threading\n"
              "b = json.dumps({'type': 'pong', 'seq': 1}).encode()\n"
              "threading.Timer(0.05, lambda: os.write(3, struct.pack('>I', len(b)) + b)).start()\n"
              "os.getpid()", "python", keep=True)
    expect_kept(r)
    wait_gone(r.done["result"])
    expect_lost(h.run("1", "python", keep=True), "python")
    # A lost runner is told to a keep execute only: one without keep just starts afresh.
    r = h.run("setTimeout(() => process.exit(3), 50); process.pid", "javascript", keep=True)
    wait_gone(r.done["result"])
    expect_ok(h.run("3", "javascript"), 3)
    h.close()


def test_session_cancel(agent):
    """A cancel in a session kills the runner: done cancelled, no kept; the next keep execute
    starts afresh."""
    h = agent.connect()
    h.hello()
    expect_kept(h.run("x = 5", "python", keep=True))
    exec_id = h.execute("import time\nprint('spinning', flush=True)\nwhile True:\n"
                        "    time.sleep(0.01)", "python", keep=True)
    h.expect("started")
    h.expect("output")
    h.send({"type": "cancel", "id": exec_id})
    done = h.expect_after_output("done")
    check(done["status"] == "cancelled" and "kept" not in done, "cancelled, not kept", done)
    expect_kept(h.run("'x' in globals()", "python", keep=True), False)
    h.close()


def test_session_quiet(agent):
    """What a kept runner writes between executes is read and dropped: it neither blocks the
    runner nor shows up in the next execute."""
    h = agent.connect()
    h.hello()
    expect_kept(h.run("let ticks = 0;\nconst t = setInterval(() => { ticks++; "
                      "console.log('tick'.repeat(1000)); }, 1);\n1", "javascript", keep=True))
    time.sleep(1)
    r = h.run("clearInterval(t);\nticks", "javascript", keep=True)
    expect_kept(r)
    check(r.done["result"] > 100, "the runner went on writing (its output was read)",
          r.summary())
    check(r.stdout.count("tick") < r.done["result"] * 1000 // 4,
          "what it wrote between executes is not in the execute's output", r.summary())
    h.close()


# ---- files ------------------------------------------------------------------------------------

def temp_files(workspace):
    return [os.path.join(d, f) for d, _, fs in os.walk(workspace) for f in fs
            if f.startswith(".sbx-")]


def test_files_round_trip(agent):
    """10 MiB of random bytes up in 1 MiB chunks (parent directories created) and down again,
    byte for byte; an empty file; replacing a file; what is refused."""
    h = agent.connect()
    h.hello()
    data = os.urandom(10 * 1024 * 1024)
    h.upload("a/b/c/blob.bin", data)
    path = os.path.join(agent.workspace, "a/b/c/blob.bin")
    check(os.path.getsize(path) == len(data) and os.stat(path).st_mode & 0o777 == 0o644,
          "in place, 0644")
    check(os.stat(os.path.join(agent.workspace, "a/b")).st_mode & 0o777 == 0o755, "dirs 0755")
    check(h.download("a/b/c/blob.bin") == data, "the same bytes back")
    r = h.file("read", "a/b/c/blob.bin", offset=len(data), length=10)
    check(r["ok"] and r["size"] == len(data) and "data" not in r, "reading at the end", r)
    r = h.file("read", "a/b/c/blob.bin", offset=5, length=7)
    check(r["data"] == data[5:12], "a chunk from an offset", r)
    h.upload("a/b/c/blob.bin", b"small")
    check(h.download("a/b/c/blob.bin") == b"small", "replaced")
    r = h.file("write", "empty", offset=0, last=True)
    check(r["ok"] and r.get("size", 0) == 0, "an empty file", r)
    r = h.file("read", "empty", offset=0, length=100)
    check(r["ok"] and r.get("size", 0) == 0 and "data" not in r, "read back empty", r)
    check(os.path.getsize(os.path.join(agent.workspace, "empty")) == 0, "on disk")
    h.file_error("write", "a/b", "EISDIR", offset=0, last=True)
    h.file_error("read", "a/b", "EISDIR", offset=0, length=1)
    h.file_error("read", "nothing", "ENOENT", offset=0, length=1)
    h.file_error("read", "empty/x", "ENOTDIR", offset=0, length=1)
    h.file_error("write", "empty/x", "ENOTDIR", offset=0, last=True)
    check(not temp_files(agent.workspace), "no temporary file left", temp_files(agent.workspace))


def test_files_offsets(agent):
    """A write whose offset is not the bytes written so far fails and its temporary file goes;
    so does an unfinished one when another starts, or when the host disconnects."""
    h = agent.connect()
    h.hello()
    r = h.file("write", "m.bin", offset=0, data=b"abc", last=False)
    check(r["ok"] and r["size"] == 3, "first chunk", r)
    check(len(temp_files(agent.workspace)) == 1, "a temporary file beside it")
    h.file_error("write", "m.bin", "EINVAL", offset=5, data=b"d", last=False)
    check(not temp_files(agent.workspace), "removed after the mismatch")
    h.file_error("write", "m.bin", "EINVAL", offset=3, data=b"d", last=True)
    check(not os.path.exists(os.path.join(agent.workspace, "m.bin")), "never put in place")
    h.file("write", "u1.bin", offset=0, data=b"abc", last=False)
    h.upload("u2.bin", b"other")
    check(not temp_files(agent.workspace), "a new write removes an unfinished one")
    h.file_error("write", "u1.bin", "EINVAL", offset=3, data=b"d", last=True)
    h.file("write", "u3.bin", offset=0, data=b"abc", last=False)
    h.close()
    deadline = time.monotonic() + 10
    while temp_files(agent.workspace):
        check(time.monotonic() < deadline, "removed when the host disconnects")
        time.sleep(0.02)
    check(sorted(os.listdir(agent.workspace)) == ["u2.bin"], "only the finished file",
          os.listdir(agent.workspace))


def test_files_list(agent):
    """list: depth first, every type, symlinks not followed, truncated at 1024 entries and when
    a name is not a workspace path (a newline, bytes that are not UTF-8)."""
    h = agent.connect()
    h.hello()
    h.upload("l/a.txt", b"aaa")
    h.upload("l/sub/b.txt", b"bb")
    h.upload("l/sub/deeper/c.txt", b"c")
    expect_ok(h.run("import os\nos.symlink('a.txt', 'l/sub/ln')\nos.mkfifo('l/fifo')\n"
                    "os.makedirs('many')\nfor i in range(1100):\n"
                    "    open(f'many/f{i}', 'w').close()\n"
                    "os.makedirs('odd/x')\nopen('odd/bad\\nname', 'w').close()\n"
                    "open(b'odd/\\xff', 'w').close()", "python"))
    r = h.file("list", "l")
    check(r["ok"] and not r.get("truncated"), "listed", r)
    entries = r["entries"]
    got = {e["path"]: (e["type"], e["size"]) for e in entries}
    check(got == {"l/a.txt": ("file", 3), "l/sub": ("dir", got.get("l/sub", (0, 0))[1]),
                  "l/sub/b.txt": ("file", 2), "l/sub/deeper": ("dir", got.get("l/sub/deeper",
                                                                              (0, 0))[1]),
                  "l/sub/deeper/c.txt": ("file", 1), "l/sub/ln": ("symlink", 5),
                  "l/fifo": ("other", 0)}, "entries, types, sizes", entries)
    paths = [e["path"] for e in entries]
    for i, p in enumerate(paths):
        if got[p][0] == "dir":
            inside = [q for q in paths if q.startswith(p + "/")]
            check(paths[i + 1:i + 1 + len(inside)] == inside, f"{p}'s entries follow it", paths)
    now = time.time() * 1e6
    check(all(abs(e["mtime_us"] - now) < 3600e6 for e in entries), "mtime_us", entries)
    r = h.file("list")
    check(r["ok"] and r["truncated"] and len(r["entries"]) == 1024, "the root: truncated", r)
    r = h.file("list", "many")
    check(r["ok"] and r["truncated"] and len(r["entries"]) == 1024, "1100 files: 1024", r)
    r = h.file("list", "odd")
    check(r["ok"] and r["truncated"] and [e["path"] for e in r["entries"]] == ["odd/x"],
          "names that are no workspace path are left out", r)
    h.file_error("list", "l/a.txt", "ENOTDIR")
    h.file_error("list", "nothing", "ENOENT")


def test_files_delete(agent):
    """delete: a directory with everything in it (also deeper than the walk's 64 levels), a
    symbolic link (not its target), a file; never the same thing twice."""
    h = agent.connect()
    h.hello()
    h.upload("d/sub/f.txt", b"f")
    h.upload("d/g.txt", b"g")
    expect_ok(h.run("import os\np = 'deep'\nfor i in range(150):\n    p += '/d'\n"
                    "os.makedirs(p)\nopen(p + '/f', 'w').close()\n"
                    "os.symlink('d', 'ln')", "python"))
    r = h.file("list", "deep")
    check(r["ok"] and r["truncated"], "a listing stops 64 levels down", r)
    check(h.file("delete", "ln")["ok"], "the link")
    check(os.path.isdir(os.path.join(agent.workspace, "d")), "not its target")
    check(h.file("delete", "d/g.txt")["ok"], "a file")
    check(h.file("delete", "d")["ok"], "a directory")
    check(h.file("delete", "deep")["ok"], "a deep directory")
    check(sorted(os.listdir(agent.workspace)) == [], "all gone", os.listdir(agent.workspace))
    h.file_error("delete", "d", "ENOENT")


def test_files_symlinks(agent):
    """Symbolic links planted by code, pointing outside the workspace: every path through one
    is refused (ELOOP) and nothing outside is read, written or deleted."""
    outside = os.path.join(agent.dir, "outside")
    os.mkdir(outside)
    with open(os.path.join(outside, "secret"), "wb") as f:
        f.write(b"keep me")
    h = agent.connect()
    h.hello()
    expect_ok(h.run(f"import os\nos.symlink({outside!r}, 'link')\n"
                    f"os.symlink({outside + '/secret'!r}, 'flink')\n"
                    "os.mkdir('d')\nos.symlink('/', 'd/root')", "python"))
    h.file_error("read", "link/secret", "ELOOP", offset=0, length=100)
    h.file_error("read", "flink", "ELOOP", offset=0, length=100)
    h.file_error("read", "d/root/etc/passwd", "ELOOP", offset=0, length=100)
    h.file_error("write", "link/new", "ELOOP", offset=0, data=b"x", last=True)
    h.file_error("write", "link/secret", "ELOOP", offset=0, data=b"x", last=True)
    h.file_error("write", "link/a/b", "ELOOP", offset=0, data=b"x", last=True)
    h.file_error("delete", "link/secret", "ELOOP")
    h.file_error("list", "link", "ELOOP")
    r = h.file("list")
    check({e["path"]: e["type"] for e in r["entries"]} ==
          {"link": "symlink", "flink": "symlink", "d": "dir", "d/root": "symlink"},
          "links listed, not followed", r)
    check(h.file("delete", "flink")["ok"] and h.file("delete", "d")["ok"], "links deleted")
    with open(os.path.join(outside, "secret"), "rb") as f:
        check(f.read() == b"keep me", "the outside file untouched")
    check(os.listdir(outside) == ["secret"], "nothing new outside", os.listdir(outside))


def test_files_cwd(agent):
    """The workspace is the code's working directory: files the code writes there are read by
    the host, files the host writes are the code's."""
    h = agent.connect()
    h.hello()
    expect_ok(h.run("with open('from_py.txt', 'w') as f:\n    f.write('py')\nimport os\n"
                    "os.getcwd()", "python"), agent.workspace)
    expect_ok(h.run("require('node:fs').writeFileSync('from_js.txt', 'js'); process.cwd()",
                    "javascript"), agent.workspace)
    check(h.download("from_py.txt") == b"py" and h.download("from_js.txt") == b"js",
          "the code's files")
    h.upload("in/data.txt", b"from the host")
    expect_ok(h.run("open('in/data.txt').read()", "python"), "from the host")
    check(os.stat(agent.workspace).st_mode & 0o777 == 0o700, "the workspace is 0700")


def test_file_during_execution(agent):
    """A file request while an execution runs breaks the protocol: error, connection closed."""
    h = agent.connect()
    h.hello()
    h.execute("await new Promise((r) => setTimeout(r, 3000))", "javascript")
    h.expect("started")
    h.send({"type": "file", "seq": 1, "op": "list"})
    err = h.expect("error")
    check(err["code"] == "protocol_error" and "file" in err["message"], "protocol_error", err)
    h.expect_closed()
    agent.connect().hello()


def frame(msg):
    body = json.dumps(msg).encode()
    return struct.pack(">I", len(body)) + body


def test_files_data_frames(agent):
    """Chunks travel in data frames. Requests in flight (the host's window) are answered in
    order, a refused write's followers too; a data frame cut in pieces is put back together. A
    data frame nothing announced, one of another length, a JSON frame where one was due: a
    protocol error, the connection closed."""
    h = agent.connect()
    h.hello()
    data, chunk = os.urandom(4 * 1024 * 1024 + 5), 1024 * 1024
    seqs = [h.file_send("write", "w.bin", data=data[off:off + chunk], offset=off,
                        last=off + chunk >= len(data)) for off in range(0, len(data), chunk)]
    for i, seq in enumerate(seqs):
        r = h.file_answer(seq)
        check(r["ok"] and r["size"] == min((i + 1) * chunk, len(data)), "writes in order", r)
    seqs = [h.file_send("read", "w.bin", offset=off, length=chunk)
            for off in range(0, len(data), chunk)]
    check(b"".join(h.file_answer(seq)["data"] for seq in seqs) == data, "reads in order")
    # the second write refused (its offset), the third in flight with it refused as well
    seqs = [h.file_send("write", "r.bin", data=b"abc", offset=0, last=False),
            h.file_send("write", "r.bin", data=b"d", offset=5, last=False),
            h.file_send("write", "r.bin", data=b"e", offset=4, last=True)]
    check(h.file_answer(seqs[0])["ok"], "first write")
    for seq in seqs[1:]:
        r = h.file_answer(seq)
        check(not r["ok"] and r["error"]["type"] == "EINVAL", "refused", r)
    check(not temp_files(agent.workspace), "no temporary file left")
    # a write whose frames come in pieces of 1..7 bytes
    piece = os.urandom(300)
    raw = frame({"type": "file", "seq": 90, "op": "write", "path": "frag.bin", "offset": 0,
                 "data_len": len(piece), "last": True}) + data_frame(piece)
    i = 0
    while i < len(raw):
        h.send_raw(raw[i:i + 1 + i % 7])
        i += 1 + i % 7
        time.sleep(0.0005)
    check(h.file_answer(90)["ok"], "the pieces put back together")
    check(h.download("frag.bin") == piece, "and written")
    # data_len belongs to a write: a read's is ignored (no data frame is due)
    h.send_raw(frame({"type": "file", "seq": 91, "op": "list", "data_len": 3}))
    check(h.file_answer(91)["ok"], "a list with data_len")
    h.close()

    def refused(raw, why):
        h = agent.connect()
        h.hello()
        h.send_raw(raw)
        err = h.expect("error")
        check(err["code"] == "protocol_error" and why in err["message"], why, err)
        h.expect_closed()

    refused(data_frame(b"abc"), "a data frame of 3 bytes that no message announced")
    write = frame({"type": "file", "seq": 1, "op": "write", "path": "x", "offset": 0,
                   "data_len": 3, "last": True})
    refused(write + data_frame(b"ab") + b"c",
            "a data frame of 2 bytes where the data frame of 3 bytes announced was due")
    ping = frame({"type": "ping", "seq": 1})
    refused(write + ping, f"a frame of {len(ping) - 4} bytes where the data frame of 3 bytes")
    refused(write + struct.pack(">I", DATA_FRAME), "a data frame of 0 bytes where")
    check(sorted(os.listdir(agent.workspace)) == ["frag.bin", "w.bin"], "nothing else written",
          os.listdir(agent.workspace))


TESTS = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("test_")}


def run_one(binary, runners, name):
    agent = Agent(binary, runners)
    failure = None
    try:
        TESTS[name](agent)
        agent.wait_no_children()
    except Skip as e:
        failure = Skip(str(e))
    except (Failure, OSError, ValueError) as e:
        failure = f"{type(e).__name__}: {e}" if not isinstance(e, Failure) else str(e)
        failure += "\n--- agent log ---\n" + agent.read_log()[-4000:]
    finally:
        try:
            agent.stop()
        except Failure as e:
            failure = failure or str(e)
    return failure


def main():
    if len(sys.argv) != 4 or (sys.argv[3] not in TESTS and sys.argv[3] != "all"):
        print(f"usage: {sys.argv[0]} AGENT RUNNERS {{all|{'|'.join(TESTS)}}}", file=sys.stderr)
        return 2
    names = list(TESTS) if sys.argv[3] == "all" else [sys.argv[3]]
    failed = skipped = 0
    for name in names:
        start = time.monotonic()
        failure = run_one(sys.argv[1], sys.argv[2], name)
        took = time.monotonic() - start
        if isinstance(failure, Skip):
            skipped += 1
            print(f"SKIP {name}: {failure}")
        elif failure:
            failed += 1
            print(f"FAIL {name} ({took:.1f} s): {failure}")
        else:
            print(f"PASS {name} ({took:.1f} s)")
    if failed:
        return 1
    return 77 if skipped == len(names) else 0  # 77: meson's "skipped"


if __name__ == "__main__":
    sys.exit(main())
