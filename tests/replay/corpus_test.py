#!/usr/bin/env python3
"""The replay corpus (issue 16, point 5; docs/replay-corpus.md): each program of corpus.json is
recorded (`sandbox run --json`, or `sandbox session exec --json` for a session's programs) and
then replayed from its record (`sandbox replay --json ID`); the verdicts are counted.

Usage: corpus_test.py SANDBOX [--shard K/N] [--by-hand] [--only FILE]... [--summary-json]

Fails if a replay diverged, if fewer than 99% of the programs replayed identically, if a
program reported not replayable is not listed in docs/replay-corpus.md, or if a recorded run is
not what its program claims (the status, the truncation corpus.json says). Prints each
program's verdict.

--shard K/N: only the K-th of N shares of the corpus (a session's programs stay together).
--by-hand: replay without `sandbox replay`, as it could be done before that verb existed: the
record's seed and clock log through `sandbox run --seed --clock-log` with the program's options,
then stdout, stderr, status, exit code, result, error, truncation and the tool calls compared
here. The tools are called again (they answer by their input alone). A session's programs cannot
be replayed this way (a run starts from the snapshot, not from the session's state).
--only FILE: only these programs (and the other programs of a session one of them is in).

Everything runs in a private scratch dir (state dir: the records; runtime dir: the VMs; the
socket of the `sandbox serve` a session needs); the snapshot cache is the build's, shared. The
PIDs started here are tracked and ended here; nothing may be left behind.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "lib"))
import procs  # noqa: E402

PROGRAMS = os.path.join(HERE, "programs")
TOOLS = os.path.join(HERE, "tools.json")
MANIFEST = os.path.join(HERE, "corpus.json")
DOC = os.path.join(TOP, "docs", "replay-corpus.md")
IDENTICAL_SHARE_MIN = 0.99  # issue 16, point 5: "at least 99% replay identical"
RUN_TIMEOUT_S = 300  # one recording or replay under TCG on a loaded machine; a hang fails
SERVE_READY_S = 300  # serve's pool full (the snapshot made if missing)


class Corpus:
    """The runs of one shard: the private directories, the environment, the PIDs started."""

    def __init__(self, sandbox, by_hand):
        self.sandbox = sandbox
        self.by_hand = by_hand
        self.scratch = tempfile.mkdtemp(prefix="sbx-replay-corpus-")
        self.state = os.path.join(self.scratch, "state")
        self.runtime = os.path.join(self.scratch, "rt")
        os.mkdir(self.state, 0o700)
        os.mkdir(self.runtime, 0o700)
        self.sock = os.path.join(self.scratch, "serve", "sandbox.sock")
        self.env = dict(os.environ, SANDBOX_STATE_DIR=self.state, XDG_RUNTIME_DIR=self.runtime,
                        TMPDIR=self.runtime, SANDBOX_SERVE_SOCKET=self.sock)
        self.env.setdefault("SANDBOX_ACCEL", "tcg")
        self.problems = []  # what makes the test fail besides the verdicts

    def call(self, argv, timeout=RUN_TIMEOUT_S, stdin=b""):
        """Run `sandbox ARGV...` (its own session: no terminal to ask approvals on); returns
        (rc, stdout, stderr). A run that does not end in @timeout is killed and fails."""
        proc = subprocess.Popen([self.sandbox, *argv], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                cwd=TOP, start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"sandbox {' '.join(argv[:2])} did not end in {timeout} s")
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def call_json(self, argv, what):
        rc, out, err = self.call(argv)
        try:
            return rc, json.loads(out)
        except ValueError:
            raise RuntimeError(f"{what}: no JSON (rc {rc}): {out[:500]!r} {err[-1500:]!r}")

    def close(self):
        """Check that nothing is left: processes carrying the scratch dir (ours by
        construction: they run in our runtime dir) are ended and reported."""
        left = [p for p in procs.processes_mentioning(self.scratch) if p != os.getpid()]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if left:
            self.problems.append(f"processes left running: {left}")
        vms = os.listdir(self.runtime)
        if vms:
            self.problems.append(f"left in the runtime dir: {vms}")
        shutil.rmtree(self.scratch, ignore_errors=True)


def run_options(prog):
    opts = ["--tools", TOOLS] if prog.get("tools") else []
    if "timeout" in prog:
        opts += ["--timeout", str(prog["timeout"])]
    if "output_limit" in prog:
        opts += ["--output-limit", str(prog["output_limit"])]
    return opts


def check_recorded(c, prog, report):
    """The recorded run is what the program claims: its status, its truncation."""
    want = prog.get("status", "ok")
    if report.get("status") != want:
        c.problems.append(f"{prog['file']}: recorded status {report.get('status')}, corpus.json "
                          f"says {want}: {json.dumps(report)[:1500]}")
    if bool(report.get("output_truncated")) != bool(prog.get("output_truncated")):
        c.problems.append(f"{prog['file']}: output_truncated is {report.get('output_truncated')}")


def record(c, prog):
    """`sandbox run --json` of one program, not through any server: (record id, its report)."""
    path = os.path.join(PROGRAMS, prog["file"])
    _, report = c.call_json(["run", "--json", "--no-serve", *run_options(prog), path],
                            f"recording {prog['file']}")
    check_recorded(c, prog, report)
    return report.get("id"), report


# ---- the replay: `sandbox replay`, or by hand --------------------------------------------------

def replay(c, prog, rid, report):
    """The verdict for one record: (verdict, detail)."""
    if rid is None:
        return "cannot_replay", "the run's report has no record id"
    if c.by_hand:
        return replay_by_hand(c, prog, rid, report)
    rc, out, err = c.call(["replay", "--json", rid])
    try:
        v = json.loads(out)
    except ValueError:
        return "cannot_replay", (f"sandbox replay printed no JSON (rc {rc}): {out[:300]!r} "
                                 f"{err[-600:]!r}")
    verdict = v.get("verdict")
    expected_rc = {"identical": 0, "diverged": 1, "not_replayable": 2, "cannot_replay": 2}
    if verdict not in expected_rc:
        return "cannot_replay", f"unknown verdict {verdict!r} (rc {rc})"
    if rc != expected_rc[verdict]:
        c.problems.append(f"{prog['file']}: sandbox replay said {verdict} and exited {rc}")
    detail = v.get("reason") or ""
    if v.get("divergence"):
        detail = json.dumps(v["divergence"])[:1500]
    return verdict, detail


COMPARED = ["status", "exit_code", "stdout", "stderr", "result", "error", "output_truncated"]


def calls_of(report):
    """The tool calls as a replay must repeat them: in call order, what was asked and answered."""
    calls = sorted(report.get("tool_calls") or [], key=lambda t: t.get("call_id", 0))
    keep = ("provider", "tool", "input", "ok", "result", "error")
    return [{k: t.get(k) for k in keep} for t in calls]


def first_difference(a, b):
    if isinstance(a, str) and isinstance(b, str):
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo, hi = max(0, i - 40), i + 80
        return f"at char {i}: recorded {a[lo:hi]!r}, replayed {b[lo:hi]!r}"
    return f"recorded {json.dumps(a)[:600]}, replayed {json.dumps(b)[:600]}"


def replay_by_hand(c, prog, rid, report):
    if prog.get("session"):
        return "cannot_replay", "by hand: a session's execution needs the session's state"
    rc, out, err = c.call(["records", "show", rid, "--json"])
    if rc != 0:
        return "cannot_replay", f"records show {rid}: rc {rc} {err[-500:]!r}"
    rec = json.loads(out)
    if rec.get("replayable") is not True:
        return "not_replayable", rec.get("not_replayable") or "the record says not replayable"
    log = os.path.join(c.scratch, "clock.json")
    with open(log, "w") as f:
        json.dump(rec["clock_log"], f)
    path = os.path.join(PROGRAMS, prog["file"])
    _, again = c.call_json(["run", "--json", "--no-serve", *run_options(prog), "--seed",
                            rec["seed"], "--clock-log", log, path], f"replaying {prog['file']}")
    for key in COMPARED:
        if report.get(key) != again.get(key):
            return "diverged", f"{key} {first_difference(report.get(key), again.get(key))}"
    a, b = calls_of(report), calls_of(again)
    if a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return "diverged", f"tool call {i + 1}: {first_difference(a[i:i + 1], b[i:i + 1])}"
    return "identical", ""


# ---- sessions: through `sandbox serve` ---------------------------------------------------------

class Serve:
    """`sandbox serve --pool 1` on the corpus's private socket, for sessions; its PID tracked."""

    def __init__(self, c):
        self.c = c
        os.makedirs(os.path.dirname(c.sock), mode=0o700, exist_ok=True)
        self.log = open(os.path.join(c.scratch, "serve.log"), "w+")
        self.proc = subprocess.Popen([c.sandbox, "serve", "--socket", c.sock, "--pool", "1",
                                      "--prestart", "0"], env=c.env, stdout=self.log,
                                     stderr=self.log, cwd=TOP, start_new_session=True)
        deadline = time.monotonic() + SERVE_READY_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if procs.serve_status(c.sock).get("ready", 0) >= 1:
                    return
            except (OSError, RuntimeError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"sandbox serve not ready in {SERVE_READY_S} s: {self.tail()}")

    def tail(self):
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.c.problems.append("sandbox serve did not end on SIGTERM in 60 s")
        self.log.close()


def record_session(c, progs):
    """The programs of one session run in one session, in order: [(prog, id, report)]."""
    serve = Serve(c)
    out = []
    try:
        rc, sid, err = c.call(["session", "new", "--idle-timeout", "600"])
        sid = sid.strip()
        if rc != 0 or not sid:
            raise RuntimeError(f"session new: rc {rc} {err[-500:]!r}")
        for prog in progs:
            lang = "typescript" if prog["file"].endswith(".ts") else (
                "python" if prog["file"].endswith(".py") else "javascript")
            _, report = c.call_json(["session", "exec", sid, "--json", "--lang", lang,
                                     *run_options(prog), "--file",
                                     os.path.join(PROGRAMS, prog["file"])],
                                    f"session exec {prog['file']}")
            check_recorded(c, prog, report)
            out.append((prog, report.get("id"), report))
        c.call(["session", "rm", sid])
    finally:
        serve.close()
    return out


# ---- the corpus --------------------------------------------------------------------------------

def units_of(programs):
    """Programs to record one by one, a session's programs as one unit, in manifest order."""
    units, sessions = [], {}
    for p in programs:
        if p.get("session"):
            if p["session"] not in sessions:
                sessions[p["session"]] = []
                units.append(sessions[p["session"]])
            sessions[p["session"]].append(p)
        else:
            units.append([p])
    return units


def listed_in_doc():
    """The program files docs/replay-corpus.md lists as not replayable (its section of that
    name: the backquoted file names that open a list item, before its first ": ")."""
    try:
        text = open(DOC).read()
    except OSError:
        return set()
    m = re.search(r"^## Not replayable\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        return set()
    items = re.split(r"^- ", m.group(1), flags=re.M)[1:]
    heads = [item.split(": ", 1)[0] for item in items]
    return {f for h in heads for f in re.findall(r"`([\w.-]+\.(?:js|ts|py))`", h)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sandbox")
    ap.add_argument("--shard", default="1/1")
    ap.add_argument("--by-hand", action="store_true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--summary-json", action="store_true",
                    help="end with the counts as one JSON line (scripts/bench)")
    args = ap.parse_args()
    k, n = (int(x) for x in args.shard.split("/"))
    if not 1 <= k <= n:
        ap.error("--shard K/N with 1 <= K <= N")
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(os.path.dirname(
        os.path.dirname(os.path.abspath(args.sandbox))), "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print("skipped: the guest image is not built")
        return 77
    with open(MANIFEST) as f:
        programs = json.load(f)["programs"]
    listed = sorted(p["file"] for p in programs)
    if listed != sorted(os.listdir(PROGRAMS)):
        print("FAIL: corpus.json and programs/ differ:",
              sorted(set(listed) ^ set(os.listdir(PROGRAMS))))
        return 1
    if args.only:  # a session's program comes with the rest of its session
        sessions = {p.get("session") for p in programs if p["file"] in args.only} - {None}
        programs = [p for p in programs if p["file"] in args.only or p.get("session") in sessions]
    units = [u for i, u in enumerate(units_of(programs)) if i % n == k - 1]
    c = Corpus(os.path.abspath(args.sandbox), args.by_hand)
    verdicts = []  # (file, verdict, detail, group)
    try:
        for unit in units:
            try:
                if unit[0].get("session"):
                    recorded = record_session(c, unit)
                else:
                    rid, report = record(c, unit[0])
                    recorded = [(unit[0], rid, report)]
                for prog, rid, report in recorded:
                    verdict, detail = replay(c, prog, rid, report)
                    verdicts.append((prog["file"], verdict, detail, prog["group"]))
                    print(f"{verdict:15} {prog['file']} {rid or ''} {detail}"[:2000], flush=True)
            except (RuntimeError, OSError, ValueError) as e:
                # A run that hung or broke: the rest of its unit (a session) is not replayed.
                done = {v[0] for v in verdicts}
                for prog in (p for p in unit if p["file"] not in done):
                    verdicts.append((prog["file"], "cannot_replay", str(e), prog["group"]))
                    print(f"{'cannot_replay':15} {prog['file']} {e}"[:2000], flush=True)
    finally:
        c.close()
    return summarize(c, verdicts, args.by_hand, args.summary_json)


def summarize(c, verdicts, by_hand, summary_json=False):
    kinds = ("identical", "not_replayable", "diverged", "cannot_replay")
    total = len(verdicts)
    for group in sorted({g for *_, g in verdicts}):
        of = [v for _, v, _, g in verdicts if g == group]
        print(f"  {group:11} {len(of):3}: " + ", ".join(f"{of.count(k)} {k}" for k in kinds))
    count = {k: sum(1 for _, v, _, _ in verdicts if v == k) for k in kinds}
    print(f"{total} programs{' (replayed by hand)' if by_hand else ''}: " +
          ", ".join(f"{n} {v}" for v, n in count.items()))
    failures = list(c.problems)
    failures += [f"{f} diverged: {d}" for f, v, d, _ in verdicts if v == "diverged"]
    listed = listed_in_doc()
    failures += [f"{f} is not replayable ({d}) but docs/replay-corpus.md does not list it"
                 for f, v, d, _ in verdicts if v == "not_replayable" and f not in listed]
    if total and count["identical"] < IDENTICAL_SHARE_MIN * total:
        failures.append(f"{count['identical']} of {total} identical: below "
                        f"{IDENTICAL_SHARE_MIN:.0%}")
    for f in failures:
        print("FAIL:", f)
    if summary_json:
        print(json.dumps(count))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
