#!/usr/bin/env python3
"""`sandbox run` and `sandbox approvals` against slow readers, terminals and long inputs
(docs/cli.md, "Output" and "Approvals on the terminal"). Usage: test-cli-output.py SANDBOX

Without a VM, against a fake `sandbox serve` on a private socket (a thread of this script):
  serve_slow_reader   a run's output floods a stdout pipe nobody reads: the client still
                      exits on the server's `done` (within the flush bound), with its exit code,
                      a note that output was dropped, and the summary;
  serve_head          the reader goes away (`| head`): the run goes on to its end;
  serve_call          --entry, --args and --kwargs reach the server's `run` frame as given
                      (numbers' literals unchanged);
  serve_terminal      output to a terminal is escaped (a character split across two frames
                      intact); the --json report on a terminal stays the same JSON;
  approvals_whole     `sandbox approvals` shows a 5 KB input whole (fetched by id when the
                      list had only its start), escaped.
With a real VM (skipped without a guest image):
  vm_slow_reader      `sandbox run --timeout 2` flooding a stdout pipe nobody reads exits 124
                      within a bound (it used to block until the reader went away);
  vm_terminal         guest control sequences reach a terminal escaped, a pipe exactly;
  vm_prompt           a direct run on a pseudo-terminal asks for an approval showing the 5 KB
                      input whole, a page at a time, and `y` runs the call.
Every process started is tracked by PID and ended by it; waits are bounded."""
import base64
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tty

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from frames import frame, recv_payload  # noqa: E402

SANDBOX = os.path.abspath(sys.argv[1])
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# As test-cli.py: the image scripts/build makes, also for the sanitizer build's binary.
IMAGE = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
HAVE_VM = os.path.exists(os.path.join(IMAGE, "manifest.json"))
failures = []
BIG_TEXT = "".join("%04d," % i for i in range(1000))  # 5000 bytes, numbered pieces
# How long a finished client may take to give up on a reader that does not read: the flush
# bound (2 s without progress, SBX_WRITER_FLUSH_STALL_MS) and a loaded machine's slack.
EXIT_BOUND_S = 15


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[-3000:], flush=True)


def output(stream, data):
    return {"type": "output", "stream": stream, "data": base64.b64encode(data).decode()}


class FakeServe:
    """A fake `sandbox serve` on a socket in a private directory: answers `status`, plays
    @on_run(conn) for a `run`, answers `approvals` with @approvals(message)."""

    def __init__(self, on_run=None, approvals=None):
        self.dir = tempfile.mkdtemp(prefix="sbx-fake-serve-")
        self.path = os.path.join(self.dir, "sandbox.sock")
        self.on_run, self.approvals = on_run, approvals
        self.requests = []
        self.payloads = []  # the frames' bytes, as the client sent them
        self.done_at = None  # monotonic time the `done` frame was sent
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                while True:
                    payload = recv_payload(conn)
                    if payload is None:
                        return
                    msg = json.loads(payload)
                    self.requests.append(msg)
                    self.payloads.append(payload)
                    if msg["type"] == "status":
                        conn.sendall(frame({"type": "status", "profile": "q35-serial",
                                            "profiles": {"q35-serial": {}}}))
                    elif msg["type"] == "run":
                        self.on_run(self, conn)
                    elif msg["type"] == "approvals":
                        conn.sendall(frame(self.approvals(msg)))
            except OSError:
                return

    def done(self, conn, exit_code, summary, report=None):
        m = {"type": "done", "exit_code": exit_code, "summary": summary}
        if report is not None:
            m["report"] = report
        conn.sendall(frame(m))
        self.done_at = time.monotonic()

    def env(self):
        return dict(os.environ, SANDBOX_SERVE_SOCKET=self.path)

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Reader(threading.Thread):
    """Reads a pipe to its end (stderr of a child)."""

    def __init__(self, f):
        super().__init__(daemon=True)
        self.f, self.data = f, b""
        self.start()

    def run(self):
        self.data = self.f.read()


def wait_or_kill(proc, timeout, what):
    """@proc's exit status within @timeout s; else a failure, SIGTERM (its cleanup), SIGKILL."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: did not exit within {timeout} s")
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return None


def raw_pty():
    """A pseudo-terminal in raw mode: (terminal side, master side)."""
    master, term = pty.openpty()
    tty.setraw(term)
    return term, master


def drain(master, until=None, timeout=10):
    """What the master side reads within @timeout s, or until @until (bytes) shows."""
    got, end = b"", time.monotonic() + timeout
    while time.monotonic() < end and (until is None or until not in got):
        if select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    return got


# ---- against a fake server ----------------------------------------------------------------

def serve_slow_reader():
    def flood(srv, conn):
        chunk = b"x" * (256 * 1024)
        for _ in range(96):  # 24 MiB: beyond the client's queue (16 MiB) and the pipe
            conn.sendall(frame(output("stdout", chunk)))
        srv.done(conn, 124, "sandbox: timeout: execution timed out after 2000 ms\n")
    srv = FakeServe(on_run=flood)
    r, w = os.pipe()  # nobody reads r until the client exited
    try:
        proc = subprocess.Popen([SANDBOX, "run", "--lang", "python", "-"], stdin=subprocess.PIPE,
                                stdout=w, stderr=subprocess.PIPE, env=srv.env())
        os.close(w)
        proc.stdin.write(b"1")
        proc.stdin.close()
        err = Reader(proc.stderr)
        rc = wait_or_kill(proc, 60, "a client whose stdout reader does not read")
        err.join(10)
        took = time.monotonic() - srv.done_at if srv.done_at else None
        text = err.data.decode(errors="replace")
        check(rc == 124, f"serve_slow_reader: the server's exit code (got {rc})", text)
        check(took is not None and took < EXIT_BOUND_S,
              f"serve_slow_reader: exited {took} s after done", text)
        check("the reader of stdout does not keep up" in text and
              text.count("does not keep up") == 1, "serve_slow_reader: one note of the drop", text)
        check("sandbox: timeout: execution timed out" in text, "serve_slow_reader: the summary",
              text)
    finally:
        os.close(r)
        srv.close()


def serve_head():
    def steady(srv, conn):
        for i in range(200):
            conn.sendall(frame(output("stdout", b"line %d\n" % i * 100)))
            time.sleep(0.005)
        srv.done(conn, 0, "")
    srv = FakeServe(on_run=steady)
    try:
        proc = subprocess.Popen([SANDBOX, "run", "--lang", "python", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=srv.env())
        proc.stdin.write(b"1")
        proc.stdin.close()
        err = Reader(proc.stderr)
        first = proc.stdout.read(100)
        proc.stdout.close()  # like `| head`: the reader is gone
        rc = wait_or_kill(proc, 60, "a client whose reader went away")
        err.join(10)
        check(first.startswith(b"line 0\n"), "serve_head: the first bytes came", first)
        check(rc == 0 and srv.done_at is not None, f"serve_head: ran to its end (rc {rc})",
              err.data)
        check(b"does not keep up" not in err.data, "serve_head: a gone reader is no slow one",
              err.data)
    finally:
        srv.close()


def serve_call():
    """--entry, --args and --kwargs reach the server's `run` as given: args and kwargs minified,
    every number's literal as typed (beyond 2^53, beyond a double, a negative zero); a run
    without them sends none of the three."""
    def answer(srv, conn):
        srv.done(conn, 0, "")
    for call in [["--entry", "f", "--args", "[9007199254740993, 1e400, -0.0, \"\\u00e9\"]",
                  "--kwargs", '{ "x" : 1.50 }'], []]:
        srv = FakeServe(on_run=answer)
        try:
            proc = subprocess.run([SANDBOX, "run", "--lang", "python", *call, "-"],
                                  input=b"def f(*a, **k):\n    return a\n", capture_output=True,
                                  env=srv.env(), timeout=60)
            runs = [p for p in srv.payloads if json.loads(p)["type"] == "run"]
            check(proc.returncode == 0 and len(runs) == 1,
                  f"serve_call: one run sent (rc {proc.returncode})", proc.stderr)
            if call:
                want = (b'"entry":"f","args":[9007199254740993,1e400,-0.0,"\\u00e9"],'
                        b'"kwargs":{"x":1.50}')
                check(runs and want in runs[0], "serve_call: the call as given", runs)
            else:
                check(runs and all(b'"%s"' % k not in runs[0] for k in
                                   [b"entry", b"args", b"kwargs"]),
                      "serve_call: no call, none sent", runs)
        finally:
            srv.close()


def serve_terminal():
    def colours(srv, conn):
        conn.sendall(frame(output("stdout", b"\x1b[2Jred\r\n\xe4")))  # a character split ...
        conn.sendall(frame(output("stdout", b"\xb8\xad\xc2\x9b!\n")))  # ... across two frames
        srv.done(conn, 0, "Error: \x1b[8mhidden\n")

    def report(srv, conn):
        srv.done(conn, 0, "", {"start": "pool", "status": "ok", "stdout": "\x7f\x9b[2J\u00e9"})
    for on_run, json_mode in [(colours, False), (report, True)]:
        srv = FakeServe(on_run=on_run)
        term, master = raw_pty()
        try:
            argv = [SANDBOX, "run", "--lang", "python", *(["--json"] if json_mode else []), "-"]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=term,
                                    stderr=term if not json_mode else subprocess.DEVNULL,
                                    env=srv.env())
            os.close(term)
            proc.stdin.write(b"1")
            proc.stdin.close()
            shown = b""
            end = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < end:
                shown += drain(master, timeout=0.2)
            wait_or_kill(proc, 10, "a client on a terminal")
            shown += drain(master, timeout=0.5)
            if not json_mode:
                check(shown == b"\\x1b[2Jred\\x0d\n\xe4\xb8\xad\\u009b!\nError: \\x1b[8mhidden\n",
                      "serve_terminal: output and summary escaped on a terminal", shown)
            else:
                check(b"\x7f" not in shown and b"\xc2\x9b" not in shown and
                      json.loads(shown) == {"start": "pool", "status": "ok",
                                            "stdout": "\x7f\x9b[2J\u00e9"},
                      "serve_terminal: the report on a terminal is the same JSON, escaped", shown)
        finally:
            os.close(master)
            srv.close()


def approvals_whole():
    big = {"path": "/tmp/x", "text": BIG_TEXT + "\x7f\u009b[2J"}
    big_text = json.dumps(big, separators=(",", ":"), ensure_ascii=False)

    def answer(msg):
        if msg.get("id") == "7":
            return {"type": "approvals", "pending": [
                {"id": "7", "provider": "files", "tool": "write", "input": big,
                 "origin": "sandbox run, pid 1", "waiting_ms": 1000, "timeout_ms": 60000}]}
        return {"type": "approvals", "pending": [
            {"id": "7", "provider": "files", "tool": "write", "input_excerpt": big_text[:4096],
             "origin": "sandbox run, pid 1", "waiting_ms": 1000, "timeout_ms": 60000},
            {"id": "8", "provider": "api", "tool": "guarded", "input": {"p": 1},
             "origin": "sandbox run, pid 2", "waiting_ms": 500, "timeout_ms": 60000}]}
    srv = FakeServe(approvals=answer)
    try:
        p = subprocess.run([SANDBOX, "approvals"], capture_output=True, env=srv.env(), timeout=60)
        out = p.stdout.decode()
        want_text = '    "text": "%s\\x7f\\u009b[2J"\n' % BIG_TEXT  # pretty, escaped, whole
        check(p.returncode == 0 and "7\tfiles.write\tsandbox run, pid 1\twaiting 1 s of 60 s\n"
              "  {\n" in out and want_text in out,
              "approvals_whole: the 5 KB input shown whole", out + p.stderr.decode())
        check({"type": "approvals", "id": "7"} in srv.requests,
              "approvals_whole: the long input was fetched by its id", srv.requests)
        check('8\tapi.guarded\tsandbox run, pid 2\twaiting 0 s of 60 s\t{"p":1}\n' in out,
              "approvals_whole: a short input on its line", out)
        check("\x7f" not in out and "\x9b" not in out, "approvals_whole: no raw controls", out)
    finally:
        srv.close()


# ---- with a real VM ----------------------------------------------------------------------

class VmEnv:
    """A private runtime directory (no `sandbox serve` answers there); checks nothing is left."""

    def __init__(self):
        self.runtime = tempfile.mkdtemp(prefix="sbx-out-rt-")
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime, TMPDIR=self.runtime,
                        SANDBOX_IMAGE_DIR=IMAGE)
        self.env.setdefault("SANDBOX_ACCEL", "tcg")

    def close(self):
        files = [os.path.join(r, n) for r, ds, fs in os.walk(self.runtime) for n in ds + fs]
        pids = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if self.runtime.encode() in f.read():
                        pids.append(int(entry))
            except (OSError, ValueError):
                pass
        for pid in pids:  # only processes that carry our private dir: ours by construction
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.runtime, ignore_errors=True)
        check(not pids, "no process left running", pids)
        check(not files, "nothing left in the runtime dir", files)


FLOOD = b"import sys\nb = 'x' * 65536\nwhile True:\n    sys.stdout.write(b)\n"


def vm_slow_reader():
    vm = VmEnv()
    r, w = os.pipe()  # nobody reads r while the run goes on
    try:
        start = time.monotonic()
        proc = subprocess.Popen([SANDBOX, "run", "--no-serve", "--lang", "python", "--timeout",
                                 "2", "--output-limit", "1G", "-"], stdin=subprocess.PIPE,
                                stdout=w, stderr=subprocess.PIPE, env=vm.env)
        os.close(w)
        proc.stdin.write(FLOOD)
        proc.stdin.close()
        err = Reader(proc.stderr)
        # The restore (or the snapshot, made once) plus 2 s plus the flush bound; before the
        # change it never exited while the reader did not read.
        rc = wait_or_kill(proc, 150, "sandbox run --timeout 2 into a pipe nobody reads")
        err.join(10)
        text = err.data.decode(errors="replace")
        print(f"vm_slow_reader: exited {rc} after {time.monotonic() - start:.1f} s", flush=True)
        check(rc == 124, f"vm_slow_reader: exit 124 (got {rc})", text)
        check("sandbox: timeout: execution timed out after 2000 ms" in text,
              "vm_slow_reader: the timeout reported", text)
        # What reached the pipe: a full pipe means the reader held output back, and that must
        # be said. On a loaded machine (ASan, other builds) the guest may not even fill the pipe
        # in 2 s: then everything was written and nothing may claim a loss.
        capacity = fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
        os.set_blocking(r, False)
        got = 0
        try:
            while True:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                got += len(chunk)
        except BlockingIOError:
            pass
        said = "does not keep up" in text or "sandbox: gave up on " in text
        print(f"vm_slow_reader: {got} bytes in the pipe (capacity {capacity})", flush=True)
        if got >= capacity:
            check(said, "vm_slow_reader: what was not written is said", text)
        else:
            check(not said, "vm_slow_reader: the pipe never filled: no loss claimed", text)
    finally:
        os.close(r)
        vm.close()


TERMINAL_JS = (b'process.stdout.write("\\x1b[2J\\x1b]0;title\\x07red\\rover\\u009b \\u00e9 ok\\n");\n'
               b'console.error("to stderr \\x1b[31m");\n')


def vm_terminal():
    vm = VmEnv()
    term, master = raw_pty()
    try:
        proc = subprocess.Popen([SANDBOX, "run", "--no-serve", "--lang", "javascript", "-"],
                                stdin=subprocess.PIPE, stdout=term, stderr=subprocess.PIPE,
                                env=vm.env)
        os.close(term)
        term = None
        proc.stdin.write(TERMINAL_JS)
        proc.stdin.close()
        err = Reader(proc.stderr)
        shown = b""
        end = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < end:
            shown += drain(master, timeout=0.2)
        rc = wait_or_kill(proc, 10, "vm_terminal")
        shown += drain(master, timeout=0.5)
        err.join(10)
        check(rc == 0 and shown == b"\\x1b[2J\\x1b]0;title\\x07red\\x0dover\\u009b \xc3\xa9 ok\n",
              "vm_terminal: stdout on a terminal escaped", shown + err.data)
        check(err.data == b"to stderr \x1b[31m\n", "vm_terminal: stderr in a pipe exact", err.data)
        p = subprocess.run([SANDBOX, "run", "--no-serve", "--lang", "javascript", "-"],
                           input=TERMINAL_JS, capture_output=True, env=vm.env, timeout=150)
        check(p.stdout == "\x1b[2J\x1b]0;title\x07red\rover\u009b \u00e9 ok\n".encode(),
              "vm_terminal: stdout in a pipe exact", p.stdout)
    finally:
        if term is not None:
            os.close(term)
        os.close(master)
        vm.close()


WRITE_TOOL = """#!/usr/bin/env python3
import json, sys
call = json.load(sys.stdin)
json.dump({"len": len(call["input"]["text"])}, sys.stdout)
"""


def vm_prompt():
    vm = VmEnv()
    tmp = tempfile.mkdtemp(prefix="sbx-out-prompt-")
    tool = os.path.join(tmp, "write-tool")
    with open(tool, "w") as f:
        f.write(WRITE_TOOL)
    os.chmod(tool, 0o755)
    cat = os.path.join(tmp, "tools.json")
    with open(cat, "w") as f:
        json.dump({"providers": {"files": {"kind": "command", "command": [tool],
                                           "tools": {"write": {}}}},
                   "policy": {"rules": [{"match": "files.*", "action": "approve"}],
                              "approval_timeout_ms": 120000}}, f)
    prog = os.path.join(tmp, "prog.py")
    with open(prog, "w") as f:
        f.write("T = ''.join('%04d,' % i for i in range(1000))\n"
                "print(tools.files.write({'text': T}))\n")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(SANDBOX, [SANDBOX, "run", "--no-serve", "--json", "--tools", cat, prog],
                      vm.env)
        finally:
            os._exit(127)
    buf, pages, answered, end = b"", 0, False, time.monotonic() + 240
    try:
        while time.monotonic() < end:
            if not select.select([fd], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break  # EIO: the child closed the terminal (it exited)
            if not chunk:
                break
            buf += chunk
            if answered:
                continue
            if buf.count(b"(y once all is shown) ") > pages:  # one Enter per question
                pages += 1
                os.write(fd, b"\n")
            elif b"approve it? [y/N]" in buf:
                os.write(fd, b"y\n")
                answered = True
    finally:
        if time.monotonic() >= end:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
        vm.close()
    text = buf.decode(errors="replace").replace("\r\n", "\n")
    check(answered and pages >= 2, f"vm_prompt: asked after {pages} more pages", text[-3000:])
    head = text.find("sandbox: tool files.write wants to run with this input (")
    ask = text.find("sandbox: approve it? [y/N]")
    lines = [ln[2:] for ln in text[head:ask].split("\n")[1:] if ln.startswith("  ")]
    check(head >= 0 and '"text": "%s"' % BIG_TEXT in "".join(lines),
          "vm_prompt: the 5 KB input shown whole", text[-3000:])
    start = text.find('{"start"')
    rep = json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else {}
    check(rep.get("status") == "ok" and "{'len': 5000}" in rep.get("stdout", ""),
          "vm_prompt: the approved call ran", text[-3000:])


def main():
    cases = [serve_slow_reader, serve_head, serve_call, serve_terminal, approvals_whole]
    if HAVE_VM:
        cases += [vm_slow_reader, vm_terminal, vm_prompt]
    else:
        print(f"the real-VM cases are skipped: no guest image in {IMAGE}")
    for case in cases:
        t0 = time.monotonic()
        try:
            case()
        except Exception as e:  # a case that breaks is a failure, the others still run
            check(False, f"{case.__name__}: {type(e).__name__}: {e}")
        print(f"{case.__name__}: {time.monotonic() - t0:.1f} s", flush=True)
    print(f"{len(failures)} failed" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
