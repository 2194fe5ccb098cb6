#!/usr/bin/env python3
"""`sandbox session` against a fake `sandbox serve` (docs/cli.md, "sandbox session"; messages:
docs/pool.md, "Sessions over the socket"). Usage: test-cli-session.py SANDBOX

The fake (a thread of this script, on a socket in a private directory) keeps sessions and
their workspaces in memory and answers as the server does: a put in pieces, a get in pieces,
errors with their codes. Checked:
  new        prints the id alone; the request carries --profile, --idle-timeout,
             --max-lifetime; --json prints the session object as sent;
  ls, show   lines per session, a reason's control characters escaped; --json as sent;
  rm         ends the session (session_end), prints its end;
  refusals   not_found, busy, quota exit 1, unavailable 125, with the server's message;
  exec       the run frame names the session and no profile; output streamed, exit code the
             done's; --json the report as sent; a refusal is 125 (as a refused `sandbox run`);
  put        a 2.5 MiB binary file in pieces of 1 MiB at their offsets, the last one marked,
             stored exactly; from stdin; an empty file; a server whose SHA-256 differs: 125;
  get        the pieces of a 2.5 MiB file into LOCAL exactly, or to stdout; a wrong SHA-256 or
             a piece out of place: 125, LOCAL not written;
  files      a line per entry (a file name's control characters escaped), --json as sent, a
             note when truncated; rmfile: deleted, or not found (1).
Every process started is waited for with a bound; nothing is left behind."""
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from frames import frame, recv_payload  # noqa: E402

SANDBOX = os.path.abspath(sys.argv[1])
MIB = 1024 * 1024
SID = "se_0123456789abcdef01234567"
failures = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[-3000:], flush=True)


def session_obj(sid, status="ready", **more):
    obj = {"id": sid, "status": status, "profile": "q35-serial", "created_ms": 1700000000000,
           "last_active_ms": 1700000000000, "expires_ms": 1700000600000, "ended_ms": None,
           "idle_timeout_s": 600, "max_lifetime_s": 3600, "executions": 0, "memory_mib": 256,
           "current_execution": None, "end_status": None, "end_reason": None, "qemu_pid": 4242}
    obj.update(more)
    return obj


def error(code, message):
    return {"type": "error", "code": code, "message": message}


class FakeServe:
    """A fake `sandbox serve` with one session (SID) whose workspace is a dict of bytes."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-session-")
        self.path = os.path.join(self.dir, "sandbox.sock")
        self.requests = []
        self.files = {}
        self.sessions = {SID: session_obj(SID)}
        self.refuse = None       # an error message answered to the next request
        self.corrupt = False     # file answers with a wrong SHA-256
        self.exec_reply = None   # the frames answered to a run
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def env(self):
        return dict(os.environ, SANDBOX_SERVE_SOCKET=self.path)

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        state = {}  # the connection's transfer: ("put", path, bytearray) or ("get", path, bytes)
        with conn:
            try:
                while True:
                    payload = recv_payload(conn)
                    if payload is None:
                        return
                    msg = json.loads(payload)
                    self.requests.append(msg)
                    if self.refuse is not None:
                        conn.sendall(frame(self.refuse))
                        continue
                    for answer in self.answer(msg, state):
                        conn.sendall(frame(answer))
            except OSError:
                return

    def sha(self, data):
        digest = hashlib.sha256(data).hexdigest()
        return ("0" if digest[0] != "0" else "1") + digest[1:] if self.corrupt else digest

    def answer(self, msg, state):
        t = msg["type"]
        if t == "session_new":
            return [{"type": "session", "session": self.sessions[SID]}]
        if t == "session_list":
            return [{"type": "sessions", "sessions": list(self.sessions.values())}]
        if t in ("session_show", "session_end"):
            s = self.sessions.get(msg["id"])
            if s is None:
                return [error("not_found", f'no session "{msg["id"]}"')]
            if t == "session_end":
                s.update(status="ended", end_status="deleted", end_reason="deleted by the client")
            return [{"type": "session", "session": s}]
        if t == "run":  # collected output comes in the report only
            return [m for m in self.exec_reply if not (msg["collect"] and m["type"] == "output")]
        if msg.get("session") != SID:
            return [error("not_found", "no session")]
        return self.file_answer(msg, state)

    def file_answer(self, msg, state):
        t, path = msg["type"], msg.get("path")
        if t == "file_put":
            data = base64.b64decode(msg["data"])
            if msg["offset"] == 0:
                state["t"] = ("put", path, bytearray())
            kind, p, buf = state["t"]
            if kind != "put" or p != path or len(buf) != msg["offset"]:
                return [error("bad_request", "file_put: offset continues no put")]
            buf += data
            if not msg["last"]:
                return [{"type": "file_part", "path": path, "size": len(buf)}]
            self.files[path] = bytes(buf)
            return [{"type": "file", "path": path, "size": len(buf), "sha256": self.sha(buf)}]
        if t == "file_get":
            if path not in self.files:
                return [error("not_found", f"no file `{path}`")]
            data, off = self.files[path], msg["offset"]
            piece = data[off:off + MIB]
            return [{"type": "file", "path": path, "size": len(data), "sha256": self.sha(data),
                     "offset": off, "data": base64.b64encode(piece).decode()}]
        if t == "file_list":
            entries = [{"path": p, "type": "file", "size": len(d), "mtime_us": 1700000000000000}
                       for p, d in sorted(self.files.items())]
            return [{"type": "files", "path": path, "entries": entries, "truncated": True}]
        if t == "file_delete":
            if self.files.pop(path, None) is None:
                return [error("not_found", f"no file `{path}`")]
            return [{"type": "file_deleted", "path": path}]
        return [error("bad_request", "unknown message type")]


def sandbox(srv, *args, stdin=b""):
    p = subprocess.run([SANDBOX, "session", *args], input=stdin, capture_output=True,
                       env=srv.env(), timeout=60)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def sessions(srv, tmp):
    rc, out, err = sandbox(srv, "new", "--profile", "microvm-serial", "--idle-timeout", "60",
                           "--max-lifetime", "120")
    check(rc == 0 and out == f"{SID}\n".encode(), "new prints the id alone", (rc, out, err))
    check(srv.requests[-1] == {"type": "session_new", "profile": "microvm-serial",
                               "idle_timeout_s": 60, "max_lifetime_s": 120},
          "new: the request carries the options", srv.requests[-1])
    rc, out, err = sandbox(srv, "new", "--json")
    check(rc == 0 and json.loads(out) == srv.sessions[SID] and
          srv.requests[-1]["idle_timeout_s"] is None, "new --json: the object as sent", out)

    srv.sessions["se_old"] = session_obj("se_old", "ended", end_status="crashed",
                                         end_reason="the guest said \x1b[2J", qemu_pid=None)
    rc, out, err = sandbox(srv, "ls")
    text = out.decode()
    check(rc == 0 and text.startswith("ID\tSTATUS\tPROFILE") and f"{SID}\tready\tq35-serial\t0\t"
          in text and "crashed: the guest said \\x1b[2J" in text and "\x1b" not in text,
          "ls: a line each, the reason escaped", text)
    rc, out, err = sandbox(srv, "ls", "--json")
    check(rc == 0 and [s["id"] for s in json.loads(out)] == [SID, "se_old"], "ls --json", out)
    rc, out, err = sandbox(srv, "show", SID)
    text = out.decode()
    check(rc == 0 and "status:       ready" in text and "QEMU PID:     4242" in text and
          "limits:       idle timeout 600 s, lifetime 3600 s" in text, "show", text)
    rc, out, err = sandbox(srv, "show", "se_nope")
    check(rc == 1 and 'no session "se_nope"' in err, "show of an unknown session: 1", (rc, err))
    rc, out, err = sandbox(srv, "rm", "se_old")
    check(rc == 0 and out == b"se_old ended (deleted)\n" and
          srv.requests[-1] == {"type": "session_end", "id": "se_old"}, "rm", (rc, out, err))
    for code, want in (("busy", 1), ("quota", 1), ("ended", 1), ("unavailable", 125)):
        srv.refuse = error(code, f"refused: {code}")
        rc, out, err = sandbox(srv, "new")
        check(rc == want and f"sandbox session new: refused: {code}" in err,
              f"new refused {code}: exit {want}", (rc, err))
    srv.refuse = None


def execs(srv, tmp):
    report = {"start": "session", "id": "x1", "status": "error", "exit_code": 3, "stdout": "hi\n"}
    srv.exec_reply = [{"type": "output", "stream": "stdout",
                       "data": base64.b64encode(b"hi\n").decode()},
                      {"type": "done", "exit_code": 3, "summary": "sandbox: it failed\n",
                       "report": report}]
    rc, out, err = sandbox(srv, "exec", SID, "--lang", "python", "--timeout", "5", "x = 1")
    run = srv.requests[-1]
    check(rc == 3 and out == b"hi\n" and "sandbox: it failed" in err,
          "exec: output and exit code of the done", (rc, out, err))
    check(run["type"] == "run" and run["session"] == SID and run["profile"] is None and
          run["code"] == "x = 1" and run["timeout_ms"] == 5000 and run["collect"] is False,
          "exec: the run names the session, no profile", run)
    prog = os.path.join(tmp, "f.py")
    with open(prog, "w") as f:
        f.write("def f(a, b=0):\n    return a + b\n")
    rc, out, err = sandbox(srv, "exec", SID, "--file", prog, "--entry", "f", "--args", "[1.50]",
                           "--kwargs", '{"b": 2}', "--json")
    run = srv.requests[-1]
    check(rc == 3 and json.loads(out) == report, "exec --json: the report as sent", out)
    check(run["language"] == "python" and run["entry"] == "f" and run["collect"] is True and
          run["args"] == [1.5] and run["kwargs"] == {"b": 2},
          "exec --file: language from the name, the call forwarded", run)
    rc, out, err = sandbox(srv, "exec", SID, "-l", "javascript", "-", stdin=b"console.log(1)")
    check(srv.requests[-1]["code"] == "console.log(1)", "exec -: the program from stdin",
          srv.requests[-1])
    rc, out, err = sandbox(srv, "exec", SID, "-l", "python", "--entry", "f", "--args", "[2]")
    check(srv.requests[-1]["code"] == "" and srv.requests[-1]["entry"] == "f",
          "exec --entry without a program: an empty one (the function is the session's)",
          srv.requests[-1])
    srv.exec_reply = [error("busy", "the session is busy (an execution runs)")]
    rc, out, err = sandbox(srv, "exec", SID, "-l", "python", "1")
    check(rc == 125 and "the session is busy" in err, "exec refused: 125 and why", (rc, err))


def files(srv, tmp):
    data = os.urandom(5 * MIB // 2) + b"\0\xff"
    local = os.path.join(tmp, "in.bin")
    with open(local, "wb") as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    n = len(srv.requests)
    rc, out, err = sandbox(srv, "put", SID, local, "data/in.bin")
    puts = [r for r in srv.requests[n:] if r["type"] == "file_put"]
    check(rc == 0 and out.decode() == f"data/in.bin: {len(data)} bytes, sha256 {sha}\n" and
          srv.files.get("data/in.bin") == data, "put: stored exactly", (rc, out, err))
    check([(p["offset"], p["last"]) for p in puts] == [(0, False), (MIB, False), (2 * MIB, True)],
          "put: pieces of 1 MiB at their offsets, the last marked", [(p["offset"], p["last"])
                                                                     for p in puts])
    rc, out, err = sandbox(srv, "put", SID, local)
    check(rc == 0 and srv.files.get("in.bin") == data, "put: REMOTE is LOCAL's name", err)
    rc, out, err = sandbox(srv, "put", SID, "-", "s.txt", stdin=b"from stdin")
    check(rc == 0 and srv.files.get("s.txt") == b"from stdin", "put from stdin", err)
    empty = os.path.join(tmp, "empty")
    open(empty, "wb").close()
    rc, out, err = sandbox(srv, "put", SID, empty, "e")
    check(rc == 0 and srv.files.get("e") == b"" and srv.requests[-1]["last"] is True,
          "put: an empty file in one piece", (rc, err))
    srv.corrupt = True
    rc, out, err = sandbox(srv, "put", SID, empty, "e")
    check(rc == 125 and "sha256" in err, "put: a SHA-256 that differs is 125", (rc, err))

    got = os.path.join(tmp, "got.bin")
    rc, out, err = sandbox(srv, "get", SID, "data/in.bin", got)
    check(rc == 125 and not os.path.exists(got), "get: a wrong SHA-256 is 125, nothing written",
          (rc, err))
    srv.corrupt = False
    n = len(srv.requests)
    rc, out, err = sandbox(srv, "get", SID, "data/in.bin", got)
    gets = [r["offset"] for r in srv.requests[n:] if r["type"] == "file_get"]
    with open(got, "rb") as f:
        check(rc == 0 and f.read() == data and gets == [0, MIB, 2 * MIB] and
              out.decode() == f"{got}: {len(data)} bytes, sha256 {sha}\n",
              "get: the pieces into LOCAL exactly", (rc, out, err, gets))
    rc, out, err = sandbox(srv, "get", SID, "data/in.bin", "-")
    check(rc == 0 and out == data, "get -: the bytes on stdout (a pipe: unchanged)", (rc, err))
    rc, out, err = sandbox(srv, "get", SID, "e", "-")
    check(rc == 0 and out == b"", "get: an empty file", (rc, err))
    rc, out, err = sandbox(srv, "get", SID, "nope", os.path.join(tmp, "nope"))
    check(rc == 1 and "no file `nope`" in err and not os.path.exists(os.path.join(tmp, "nope")),
          "get: no such file is 1", (rc, err))

    srv.files["evil\x1b[2Jname"] = b"x"
    rc, out, err = sandbox(srv, "files", SID)
    text = out.decode()
    check(rc == 0 and "file\t2621442\t" in text and "\tdata/in.bin\n" in text and
          "evil\\x1b[2Jname" in text and "\x1b" not in text and "more entries" in err,
          "files: a line each, names escaped, truncated noted", (text, err))
    rc, out, err = sandbox(srv, "files", SID, "data", "--json")
    check(rc == 0 and isinstance(json.loads(out), list) and
          srv.requests[-1] == {"type": "file_list", "session": SID, "path": "data"},
          "files DIR --json", (out, srv.requests[-1]))
    rc, out, err = sandbox(srv, "rmfile", SID, "data/in.bin")
    check(rc == 0 and out == b"deleted data/in.bin\n" and "data/in.bin" not in srv.files,
          "rmfile", (rc, out, err))
    rc, out, err = sandbox(srv, "rmfile", SID, "data/in.bin")
    check(rc == 1 and "no file" in err, "rmfile: no such file is 1", (rc, err))


def main():
    with tempfile.TemporaryDirectory(prefix="sbx-cli-session-") as tmp:
        srv = FakeServe()
        try:
            for case in (sessions, execs, files):
                try:
                    case(srv, tmp)
                except Exception as e:  # a case that breaks is a failure, the others still run
                    check(False, f"{case.__name__}: {type(e).__name__}: {e}")
        finally:
            srv.close()
    print(f"{len(failures)} failed" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
