#!/usr/bin/env python3
"""`sandbox replay [--live --tools FILE] [--json] [--db PATH] ID` with real VMs. Usage:
test-replay-cli.py SANDBOX_BINARY

Everything runs in a scratch dir of its own: the store (SANDBOX_STATE_DIR), the runtime dirs
(XDG_RUNTIME_DIR, TMPDIR) and the server's socket (SANDBOX_SERVE_SOCKET, in a 0700 dir).
Checked:
  usage        no id, `--tools` without `--live`: exit 2 with the reason;
  missing      an id with no record: exit 2, `no record "ID"`; --json {"id","verdict":
               "cannot_replay","reason"}; a store that cannot be opened: exit 2, why on one
               line of stderr (--json: in the reason, stderr empty);
  identical    a JavaScript record of Math.random()/Date.now(): exit 0, `identical`; --json
               {"id","verdict":"identical","duration_ms","recorded_duration_ms"} and nothing
               else; a Python record with a tool call (tests/integration/tools.json): exit 0;
  diverged     that record's tool result changed in sandbox.db: exit 1, `diverged` then
               `first divergence: stdout at byte ...` with both sides; --json its divergence;
               --live --tools calls calc again: `first divergence: tool result at call 1
               (calc.add): recorded {"result":43}, replayed {"result":42}`, --json with every
               difference; --live without --tools: no tool, no call (`tool calls`), and every
               other difference on an `also:` line; a result changed in sandbox.db: the
               divergence `result`, `where` null;
  cannot       another image in the record: exit 2, `the image differs`; a damaged seed:
               --json "cannot_replay";
  not replayable  a Python program that starts a thread: exit 2, `not replayable:` and why;
               --json verdict "not_replayable" with the reason;
  snapshot gone   SANDBOX_SNAPSHOT_DIR pointing to an empty dir of the scratch dir (the build's
               cache is never touched): exit 2 naming the snapshot as gone; --json
               "cannot_replay";
  interrupted  SIGINT while a replay runs: exit 130 at once, no verdict, its VM gone;
  session      through `sandbox serve` and `sandbox session`: `x = random.random()` then
               `print(x)`, the second replayed (after the first, on one VM): exit 0 identical;
               a file put into the session, the next execution: exit 2 not replayable;
No QEMU of a replay outlives its `sandbox replay`; nothing is left in the scratch dir's
runtime dirs nor running. Exit 77 only when the guest image is not built."""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

SANDBOX = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(HERE, "tools.json")
failures = []
checks = [0]


def check(cond, what, detail=""):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[-3000:], flush=True)
    return cond


class Scratch:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-replay-cli-")
        os.chmod(self.dir, 0o711)  # the VMs' jail reaches the runtime dirs in it
        self.rt = os.path.join(self.dir, "rt")
        self.sockdir = os.path.join(self.dir, "sock")
        self.state = os.path.join(self.dir, "state")
        for d in (self.rt, self.sockdir, self.state):
            os.makedirs(d, 0o700)
        self.db = os.path.join(self.state, "sandbox.db")
        self.sock = os.path.join(self.sockdir, "sandbox.sock")
        self.started = set()  # PIDs of every process started, and what was seen below them

    def env(self, **extra):
        env = dict(os.environ, SANDBOX_STATE_DIR=self.state, XDG_RUNTIME_DIR=self.rt,
                   TMPDIR=self.rt, SANDBOX_SERVE_SOCKET=self.sock)
        env.update(extra)
        env.setdefault("SANDBOX_ACCEL", "tcg")
        return env

    def sandbox(self, *args, stdin=b"", timeout=300, env_extra=None):
        """(exit status, stdout, stderr) of `sandbox ARGS`; killed (by PID) past @timeout."""
        p = subprocess.Popen([SANDBOX, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env(**(env_extra or {})),
                             cwd=TOP, start_new_session=True)
        self.started.add(p.pid)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise RuntimeError(f"sandbox {' '.join(args)} did not end within {timeout} s")
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def run(self, lang, code, *extra, env_extra=None):
        """A `sandbox run --json` that ended ok: its report."""
        rc, out, err = self.sandbox("run", "--lang", lang, "--json", *extra, "-",
                                    stdin=code.encode(), env_extra=env_extra)
        rep = json.loads(out) if out.strip().startswith("{") else {}
        check(rc == 0 and rep.get("status") == "ok", f"sandbox run {lang} ran ok",
              (rc, out[-1500:], err[-1500:]))
        return rep

    def replay(self, *args, env_extra=None):
        rc, out, err = self.sandbox("replay", *args, env_extra=env_extra)
        self.no_vm_left(f"replay {' '.join(args)}")
        return rc, out, err

    def no_vm_left(self, what):
        """Nothing started in the runtime dirs still runs once the CLI exited."""
        left = [p for p in procs.processes_mentioning(self.rt) if procs.alive(p)]
        check(not left, f"{what}: no process left in the runtime dir", left)

    def close(self):
        left = [p for p in procs.processes_mentioning(self.dir) if procs.alive(p)]
        left += [p for p in self.started if procs.alive(p) and p not in left]
        for p in left:  # ours by construction: they carry our scratch dir, or we started them
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        check(not left, "nothing left running", left)
        files = []
        for root, dirs, names in os.walk(self.rt):
            files += [os.path.join(root, n) for n in dirs + names]
        check(not files, "nothing left in the runtime dir", files)
        shutil.rmtree(self.dir, ignore_errors=True)


def json_of(out, what):
    try:
        return json.loads(out)
    except ValueError:
        check(False, f"{what}: one JSON object on stdout", out[-1500:])
        return {}


def only_keys(obj, keys, what):
    check(set(obj) == set(keys), f"{what}: the members {sorted(keys)}", obj)


# ---- sections --------------------------------------------------------------------------------

def usage(s):
    rc, out, err = s.sandbox("replay")
    check(rc == 2 and "expected one execution id" in err, "no id: exit 2, the reason", (rc, err))
    rc, out, err = s.sandbox("replay", "--tools", TOOLS, "x0123456789abcdef")
    check(rc == 2 and "--tools is for --live" in err and out == "",
          "--tools without --live: a usage error (2)", (rc, out, err))
    rc, out, err = s.sandbox("replay", "--bogus", "x0123456789abcdef")
    check(rc == 2 and out == "", "an unknown option: exit 2", (rc, out, err))


def missing(s):
    rc, out, err = s.replay("x0123456789abcdef")
    check(rc == 2 and 'sandbox replay: no record "x0123456789abcdef"' in err and out == "",
          "a missing id: exit 2, no record", (rc, out, err))
    rc, out, err = s.replay("--json", "x0123456789abcdef")
    obj = json_of(out, "--json of a missing id")
    check(rc == 2 and obj.get("id") == "x0123456789abcdef" and
          obj.get("verdict") == "cannot_replay" and "no record" in obj.get("reason", ""),
          "--json of a missing id: cannot_replay with the reason", (rc, out, err))
    only_keys(obj, ["id", "verdict", "reason"], "--json of a missing id")
    # A store that cannot be opened (its directory is a file): the reason said once.
    notdir = os.path.join(s.dir, "not-a-dir")
    open(notdir, "w").close()
    db = os.path.join(notdir, "sandbox.db")
    rc, out, err = s.replay("--db", db, "x0123456789abcdef")
    check(rc == 2 and out == "" and err.count("\n") == 1 and
          err.startswith("sandbox replay: ") and notdir in err,
          "a store that cannot be opened: exit 2, one line on stderr saying why", (rc, out, err))
    rc, out, err = s.replay("--json", "--db", db, "x0123456789abcdef")
    obj = json_of(out, "--json of a store that cannot be opened")
    check(rc == 2 and err == "" and obj.get("verdict") == "cannot_replay" and
          notdir in obj.get("reason", ""),
          "--json of a store that cannot be opened: cannot_replay with the reason, no stderr",
          (rc, out, err))
    os.unlink(notdir)


JS = "const v = [Math.random(), Date.now()];\nconsole.log(JSON.stringify(v));\nv"
PY_TOOL = ("import random\nr = tools.calc.add(a=2, b=40)\n"
           "print('got', r['result'], random.random())\nr['result']")


def identical_and_diverged(s):
    js = s.run("javascript", JS)
    rc, out, err = s.replay(js.get("id", "?"))
    check(rc == 0 and out == "identical\n", "a JavaScript record: exit 0, identical",
          (rc, out, err))
    rc, out, err = s.replay("--json", js.get("id", "?"))
    obj = json_of(out, "--json identical")
    check(rc == 0 and obj.get("id") == js.get("id") and obj.get("verdict") == "identical" and
          isinstance(obj.get("duration_ms"), int) and
          obj.get("recorded_duration_ms") == js.get("duration_ms"),
          "--json: identical, the replay's and the record's durations", (rc, out, err))
    only_keys(obj, ["id", "verdict", "duration_ms", "recorded_duration_ms"], "--json identical")

    py = s.run("python", PY_TOOL, "--tools", TOOLS)
    check(py.get("stdout", "").startswith("got 42 "), "the tool answered 42", py)
    rc, out, err = s.replay(py.get("id", "?"))
    check(rc == 0 and out == "identical\n", "a Python record with a tool call: identical",
          (rc, out, err))
    store_update(s, "UPDATE tool_calls SET result_json = ? WHERE execution_id = ?",
                 ('{"result":43}', py.get("id")))
    rc, out, err = s.replay(py.get("id", "?"))
    lines = out.splitlines()
    check(rc == 1 and lines[:1] == ["diverged"] and len(lines) == 2 and
          lines[1].startswith("first divergence: stdout at byte 5 (line 1): recorded "
                              "\"got 42 ") and ", replayed \"got 43 " in lines[1],
          "the changed result answered: exit 1, the first divergence in stdout",
          (rc, out, err))
    rc, out, err = s.replay("--json", py.get("id", "?"))
    obj = json_of(out, "--json diverged")
    d = obj.get("divergence") or {}
    check(rc == 1 and obj.get("verdict") == "diverged" and d.get("what") == "stdout" and
          d.get("where") == "byte 5 (line 1)" and d.get("recorded", "").startswith('"got 42 ') and
          d.get("replayed", "").startswith('"got 43 ') and "differences" not in obj,
          "--json diverged: the divergence, no differences", (rc, out, err))
    only_keys(d, ["what", "where", "recorded", "replayed"], "the divergence")
    rc, out, err = s.replay("--live", "--tools", TOOLS, py.get("id", "?"))
    check(rc == 1 and out == 'diverged\nfirst divergence: tool result at call 1 (calc.add): '
          'recorded {"result":43}, replayed {"result":42}\n',
          "--live --tools: the tool called again answers 42, the record says 43",
          (rc, out, err))
    rc, out, err = s.replay("--live", "--tools", TOOLS, "--json", py.get("id", "?"))
    obj = json_of(out, "--json --live")
    check(rc == 1 and obj.get("differences") == [obj.get("divergence")] and
          (obj.get("divergence") or {}).get("what") == "tool result",
          "--json --live: every difference (that one)", (rc, out, err))
    rc, out, err = s.replay("--live", py.get("id", "?"))
    lines = out.splitlines()
    check(rc == 1 and lines[:2] == ["diverged", "first divergence: tool calls: "
                                    "recorded 1 calls, replayed 0 calls"] and
          "also: status: recorded ok, replayed error" in lines and
          "also: exit code: recorded 0, replayed 1" in lines,
          "--live without --tools: no tool in the namespace, no call; every difference shown",
          (rc, out, err))

    # the snapshot gone: an empty snapshot dir of our own (the build's cache is not touched)
    empty = os.path.join(s.dir, "no-snapshots")
    os.makedirs(empty)
    gone = {"SANDBOX_SNAPSHOT_DIR": empty}
    key = records_show(s, js.get("id"))["snapshot_key"]
    rc, out, err = s.replay(js.get("id", "?"), env_extra=gone)
    check(rc == 2 and f"snapshot {key} of record {js.get('id')} is gone" in err and
          out == "", "its snapshot gone: exit 2, the snapshot named as gone", (rc, out, err))
    rc, out, err = s.replay("--json", js.get("id", "?"), env_extra=gone)
    obj = json_of(out, "--json, snapshot gone")
    check(rc == 2 and obj.get("verdict") == "cannot_replay" and "is gone" in obj.get("reason", ""),
          "--json, snapshot gone: cannot_replay", (rc, out, err))
    # --db names the store
    rc, out, err = s.replay("--db", os.path.join(s.dir, "other.db"), js.get("id", "?"))
    check(rc == 2 and "no record" in err, "--db: another store has no such record",
          (rc, out, err))
    rc, out, err = s.replay("--db", s.db, js.get("id", "?"))
    check(rc == 0 and out == "identical\n", "--db: the store named", (rc, out, err))
    # a value compared whole: no place in it
    store_update(s, "UPDATE executions SET result_json = ? WHERE id = ?", ("[1,2]", js.get("id")))
    rc, out, err = s.replay("--json", js.get("id", "?"))
    d = json_of(out, "--json, a changed result").get("divergence") or {}
    check(rc == 1 and d.get("what") == "result" and d.get("where", "") is None and
          d.get("recorded") == "[1,2]" and json.loads(d.get("replayed") or "0") == js.get("result"),
          "a changed result: divergence result, where null, both values", (rc, out, err))
    rc, out, err = s.replay(js.get("id", "?"))
    check(rc == 1 and out.startswith("diverged\nfirst divergence: result: recorded [1,2], "
                                     "replayed ["), "the same in words", (rc, out, err))
    # what this host cannot replay: another image, a damaged record
    store_update(s, "UPDATE executions SET image_id = ? WHERE id = ?", ("0" * 64, py.get("id")))
    rc, out, err = s.replay(py.get("id", "?"))
    check(rc == 2 and f"record {py.get('id')} ran on image {'0' * 64}, this host has" in err and
          "the image differs" in err, "another image: exit 2, the image differs", (rc, out, err))
    store_update(s, "UPDATE executions SET seed_hex = ? WHERE id = ?", ("zz", js.get("id")))
    rc, out, err = s.replay("--json", js.get("id", "?"))
    obj = json_of(out, "--json, a damaged seed")
    check(rc == 2 and obj.get("verdict") == "cannot_replay" and
          "its seed is not 64 hex digits" in obj.get("reason", ""),
          "a damaged seed: exit 2, cannot_replay", (rc, out, err))


def store_update(s, sql, args):
    with sqlite3.connect(s.db, timeout=30) as c:
        n = c.execute(sql, args).rowcount
    c.close()
    check(n == 1, f"sandbox.db changed: {sql}", n)


def interrupted(s):
    """SIGINT while a replay runs: exit 130 at once, its VM gone."""
    ex = s.run("python", "import time\ntime.sleep(12)\nprint('slept')")
    p = subprocess.Popen([SANDBOX, "replay", ex.get("id", "?")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=s.env(), cwd=TOP, start_new_session=True)
    s.started.add(p.pid)
    time.sleep(3)
    vms = [q for q in procs.descendants(p.pid) if procs.alive(q)]
    check(vms, "the replay's VM runs below the CLI", vms)
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    check(p.returncode == 130 and time.monotonic() - start < 8 and b"identical" not in out,
          "SIGINT: exit 130 before the replay would end, no verdict",
          (p.returncode, time.monotonic() - start, out, err))
    check(not [q for q in vms if procs.alive(q)], "its VM is gone", vms)
    s.no_vm_left("an interrupted replay")


def records_show(s, rid):
    rc, out, err = s.sandbox("records", "show", rid, "--json")
    check(rc == 0, f"records show {rid}", err)
    return json_of(out, "records show")


def not_replayable(s):
    ex = s.run("python", "import threading\nt = threading.Thread(target=lambda: None)\n"
                         "t.start()\nt.join()\nprint('joined')")
    rec = records_show(s, ex.get("id", "?"))
    check(rec.get("replayable") is False and "thread" in (rec.get("not_replayable") or ""),
          "the record says not replayable, and why", rec)
    rc, out, err = s.replay(ex.get("id", "?"))
    check(rc == 2 and re.search(r"^sandbox replay: record \S+ is not replayable: a thread was "
                                r"started", err, re.M) is not None and out == "",
          "a thread: exit 2, `not replayable:` and why", (rc, out, err))
    rc, out, err = s.replay("--json", ex.get("id", "?"))
    obj = json_of(out, "--json not replayable")
    check(rc == 2 and obj.get("verdict") == "not_replayable" and
          "a thread was started" in obj.get("reason", ""),
          "--json: not_replayable with the reason", (rc, out, err))
    # SANDBOX_REPLAY=off: no seed went to the guest, so the record is not replayable
    off = s.run("javascript", "console.log(Math.random())", env_extra={"SANDBOX_REPLAY": "off"})
    rec = records_show(s, off.get("id", "?"))
    check(rec.get("seed") is None and rec.get("replayable") is False and
          "no seed" in (rec.get("not_replayable") or ""),
          "SANDBOX_REPLAY=off: recorded without a seed, not replayable", rec)
    rc, out, err = s.replay(off.get("id", "?"))
    check(rc == 2 and "no seed" in err, "SANDBOX_REPLAY=off: the replay says why not",
          (rc, out, err))


def session(s):
    serve = subprocess.Popen([SANDBOX, "serve", "--socket", s.sock, "--db", s.db, "--pool", "1"],
                             env=s.env(), stdin=subprocess.DEVNULL,
                             stdout=open(os.path.join(s.dir, "serve.log"), "ab"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    s.started.add(serve.pid)
    try:
        session_with(s, serve)
    finally:
        s.started |= procs.descendants(serve.pid)
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                check(serve.wait(timeout=60) == 0, "sandbox serve: SIGTERM, exit 0")
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(timeout=30)
                check(False, "sandbox serve ended within 60 s of SIGTERM")


def session_with(s, serve):
    end = time.monotonic() + 240
    while time.monotonic() < end and serve.poll() is None:
        try:
            procs.serve_status(s.sock)
            break
        except (OSError, RuntimeError, ValueError):
            time.sleep(0.3)
    if not check(serve.poll() is None and time.monotonic() < end, "sandbox serve answers",
                 open(os.path.join(s.dir, "serve.log"), errors="replace").read()[-3000:]):
        return
    s.started |= procs.descendants(serve.pid)
    rc, out, err = s.sandbox("session", "new")
    sid = out.strip()
    if not check(rc == 0 and sid.startswith("se_"), "sandbox session new", (rc, out, err)):
        return

    def exec_in(code):
        rc, out, err = s.sandbox("session", "exec", sid, "--lang", "python", "--json", code)
        rep = json_of(out, "session exec --json")
        check(rc == 0 and rep.get("status") == "ok", "sandbox session exec", (rc, out, err))
        return rep.get("id", "?")
    exec_in("import random\nx = random.random()")
    second = exec_in("print(x)")
    rc, out, err = s.replay(second)
    check(rc == 0 and out == "identical\n",
          "a session's second execution, replayed after its first: identical", (rc, out, err))
    # its bundle brings the first along: replayed in a fresh state dir, no snapshot cache
    bundle = os.path.join(s.dir, "second.bundle")
    rc, out, err = s.sandbox("records", "export", second, bundle)
    check(rc == 0, "records export of a session's second execution", (rc, out, err))
    fresh, cache = os.path.join(s.dir, "fresh-state"), os.path.join(s.dir, "empty-cache")
    os.makedirs(fresh, 0o700)
    os.makedirs(cache, 0o700)
    rc, out, err = s.replay("--bundle", bundle,
                            env_extra={"SANDBOX_STATE_DIR": fresh, "SANDBOX_SNAPSHOT_DIR": cache})
    check(rc == 0 and out == "identical\n",
          "its bundle, replayed elsewhere after the first (session.jsonl): identical",
          (rc, out, err))
    check(not os.listdir(fresh), "nothing unpacked is left", os.listdir(fresh))
    os.unlink(bundle)
    local = os.path.join(s.dir, "in.txt")
    with open(local, "w") as f:
        f.write("from outside\n")
    rc, out, err = s.sandbox("session", "put", sid, local, "in.txt")
    check(rc == 0, "sandbox session put", (rc, out, err))
    third = exec_in("print(open('in.txt').read(), x)")
    rc, out, err = s.replay(third)
    check(rc == 2 and "is not replayable: files of its session were put or deleted" in err,
          "after a file put into the session: exit 2, not replayable, why", (rc, out, err))
    rc, out, err = s.sandbox("session", "rm", sid)
    check(rc == 0, "sandbox session rm", (rc, out, err))


def main():
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image}")
        return 77
    s = Scratch()
    try:
        for fn in (usage, missing, identical_and_diverged, not_replayable, interrupted,
                   session):
            print(f"-- {fn.__name__}", flush=True)
            try:
                fn(s)
            except Exception as e:  # noqa: BLE001 - reported as a failure, not swallowed
                check(False, f"{fn.__name__}: {type(e).__name__}: {e}", traceback.format_exc())
    finally:
        if failures and os.path.exists(os.path.join(s.dir, "serve.log")):
            print("-- serve.log:\n" + open(os.path.join(s.dir, "serve.log"),
                                           errors="replace").read()[-4000:])
        s.close()
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
