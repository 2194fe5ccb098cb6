#!/usr/bin/env python3
"""The hostile-guest suite (issue 11, point 6): guest code that attacks the host through the
sandbox, and a host that loses the sandbox's processes; real VMs through `sandbox run` and
`sandbox serve`. What each scenario does and asserts: README.md.

Usage: hostile_test.py SANDBOX SCENARIO [--as-nobody [--limit SECONDS]]

--as-nobody: when run as root, re-run the scenario as `nobody` (setpriv --reuid 65534 --regid
65534 --clear-groups) with HOME, XDG_RUNTIME_DIR and TMPDIR in a private dir owned by nobody
and the snapshot cache <build>/tests/hostile/snapshots-65534, within --limit seconds (default
500); rootless, the jail and the limits differ as README.md, "As nobody" says. Not root: 77
(the scenario without --as-nobody runs as this unprivileged user already).
Exit 0 pass, 1 fail, 77 skipped (no guest image; --as-nobody when not root).
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree (also as nobody)

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pty  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tty  # noqa: E402

from hostile_lib import (  # noqa: E402
    HERE, HOST_RSS_MAX_MIB, IS_ROOT, MIB, SLACK_S, GONE_WAIT_S, TOP, Env, Failure, Reader, Watch,
    assert_jail, assert_limits, check, check_cgroups_gone, finding, log, read, reap_and_wait_gone,
    remove_cgroup_dirs, report, serve_status, shm_entries, start, summary, wait_or_end,
    become_subreaper, image_dir, snapshot_dir_default, start_time, processes_mentioning)

SLOT_TOOL = os.path.join(HERE, "slot-tool")
# The tool's interpreter: Debian's, readable by nobody too, and not a version manager's shim
# (pyenv's costs ~0.5 s per start); -S: no site packages, a faster start.
TOOL_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
OUTPUT_LIMIT_DEFAULT = 10 * MIB  # docs/cli.md, --output-limit
# The bridge's own memory (RssAnon; its VmRSS also counts the guest RAM pages it touched):
# by design at most --max-conns 64 x 2 x --conn-buf 256 KiB = 32 MiB of connection buffers
# (bridge/README.md, "What the guest can and cannot do"), plus the process itself.
BRIDGE_ANON_MAX_MIB = 48
# Test-only profiles (profiles/*.json): sandbox.test_root=1 on the guest kernel command line,
# guest code runs as root (docs/guest-image.md, "A test-only root"). Used through
# SANDBOX_PROFILES_DIR by the scenarios that need root in the guest; never in qemu-profiles/.
TEST_PROFILES = os.path.join(HERE, "profiles")


class Run:
    """One `sandbox` process we started, watched (hostile_lib.Watch) until it exits."""

    def __init__(self, env, argv, code=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 extra=None, marker=None, keep=1 << 24):
        self.t0 = time.monotonic()
        self.proc = start(env, argv, code, stdout=stdout, stderr=stderr, extra=extra)
        self.watch = Watch(self.proc.pid)
        self.out = Reader(self.proc.stdout, keep=keep, marker=marker) \
            if stdout == subprocess.PIPE else None
        self.err = Reader(self.proc.stderr) if stderr == subprocess.PIPE else None
        self.rc, self.t_exit = None, None
        self.limits = None  # after finish(): "cgroups", or "none" (rootless: no host limits)

    def wait(self, timeout, what):
        self.rc = wait_or_end(self.proc, timeout, what)
        self.t_exit = time.monotonic()
        self.watch.stop()
        for r in (self.out, self.err):
            if r:
                r.join(15)
        return self.rc

    def t_vm(self):
        """When the VM's QEMU was first seen (the restore started), else the spawn."""
        return self.watch.first_seen("qemu") or self.t0

    def report(self):
        r = report(bytes(self.out.data)) if self.out else None
        check(r is not None, "sandbox run --json printed one JSON object",
              f"rc {self.rc}\nstdout {bytes(self.out.data[:1000]) if self.out else b''!r}\n"
              f"stderr {self.err.text()[-2000:] if self.err else ''}")
        return r or {}

    def stderr(self):
        return self.err.text() if self.err else ""


def brief(r):
    return json.dumps({k: v for k, v in r.items() if k not in ("stdout", "stderr",
                                                               "tool_calls")})[:1500]


def finish(run, label, killed=False, stderr_text=None):
    """The checks of every scenario after its run: the jail was in place, the VMs' host-side
    limits as the agent said (cgroups, or none rootless: run.limits), host memory bounded,
    every process the agent started is gone, no cgroup of it left. @stderr_text: the agent's
    stderr when it did not go to a pipe of ours (the terminal scenario)."""
    ok_jail = assert_jail(run.watch, label)
    check(ok_jail, f"{label}: at least one QEMU was seen with its jail complete")
    run.limits = assert_limits(run.watch, label,
                               stderr_text if stderr_text is not None else
                               (run.stderr() if run.err else None))
    hwm = run.watch.hwm_kib / 1024
    log(f"{label}: sandbox peak RSS (VmHWM) {hwm:.1f} MiB; QEMU peak RSS "
        f"{[round(k / 1024) for k in run.watch.qemu_rss_kib.values()]} MiB")
    check(0 < hwm < HOST_RSS_MAX_MIB, f"{label}: the sandbox process stayed under "
          f"{HOST_RSS_MAX_MIB} MiB (VmHWM {hwm:.1f} MiB)")
    if run.watch.bridge_anon_kib:
        anon = max(run.watch.bridge_anon_kib.values()) / 1024
        rss = [round(k / 1024, 1) for k in run.watch.bridge_rss_kib.values()]
        log(f"{label}: bridge peak RSS {rss} MiB, of it its own memory (RssAnon) {anon:.1f} MiB")
        check(anon < BRIDGE_ANON_MAX_MIB, f"{label}: the bridge's own memory stayed under "
              f"{BRIDGE_ANON_MAX_MIB} MiB (RssAnon {anon:.1f} MiB)")
    procs = run.watch.all()
    reap_and_wait_gone(procs, GONE_WAIT_S, f"{label}: what the agent started")
    return check_cgroups_gone(run.proc.pid, label, killed=killed)


def expect(run, r, status, rc, label):
    check(r.get("status") == status and run.rc == rc,
          f"{label}: status {status} and exit {rc} (got {r.get('status')}, {run.rc})", brief(r))


def bounded(run, label, limit_s, since=None):
    took = run.t_exit - (since if since is not None else run.t_vm())
    log(f"{label}: ended {took:.1f} s after the VM's start (bound {limit_s:.0f} s)")
    check(took <= limit_s, f"{label}: ended within {limit_s:.0f} s of the VM's start "
          f"(took {took:.1f} s)")


def tools_catalog(env, log_path, timeout_ms=120000):
    path = env.path("tools.json")
    with open(path, "w") as f:
        json.dump({"providers": {"slow": {
            "kind": "command", "command": [TOOL_PYTHON, "-S", SLOT_TOOL], "timeout_ms": timeout_ms,
            "env": {"HOSTILE_TOOL_LOG": log_path}, "tools": {"work": {}}}}}, f)
    return path


def tool_log(path):
    """[(event, pid, t_ns)] from slot-tool's log."""
    out = []
    for line in (read(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


# ---- 1. fork bombs -----------------------------------------------------------------------------

FORK_BOMB = {
    "python": "import os\nprint('bomb', flush=True)\nwhile True:\n    try:\n"
              "        os.fork()\n    except OSError:\n        pass\n",
    "javascript": "const cp = require('child_process');\nconsole.log('bomb');\n"
                  "while (true) { try { cp.spawn('sleep', ['100']); } catch (e) {} }\n",
}


def fork_bomb(env, lang):
    label = f"fork_bomb_{lang}"
    timeout = 8
    run = Run(env, ["run", "--no-serve", "--json", "--lang", lang, "--timeout", str(timeout), "-"],
              FORK_BOMB[lang].encode())
    run.wait(timeout + 120, label)
    r = run.report()
    # The host ends it at the timeout whatever the guest's process table looks like; or before,
    # when the forks' memory runs the guest out of it first and its OOM killer ends the runner
    # (seen with Python, whose children each dirty their copy of its heap, on a loaded host):
    # then it is the program's memory_limit, as for a memory bomb. Either way it is contained.
    outcome = {"timeout": 124, "memory_limit": 137}
    status = r.get("status")
    check(status in outcome and run.rc == outcome[status],
          f"{label}: status timeout and exit 124, or memory_limit and 137 (got {status}, "
          f"{run.rc})", brief(r))
    check((r.get("error") or {}).get("code") == status, f"{label}: error code {status}",
          brief(r))
    check(r.get("stdout", "").startswith("bomb\n"), f"{label}: the bomb went off",
          r.get("stdout", "")[:200])
    bounded(run, label, timeout + SLACK_S)
    finish(run, label)


def scenario_fork_bomb_python(env):
    fork_bomb(env, "python")


def scenario_fork_bomb_js(env):
    fork_bomb(env, "javascript")


# ---- 2. memory bombs ---------------------------------------------------------------------------

MEMORY_BOMB = {
    "python": "a = []\nwhile True:\n    a.append(bytes([len(a) & 255]) * (1 << 20))\n",
    "javascript": "const a = [];\nwhile (true) a.push(Buffer.alloc(1 << 20, a.length & 255));\n",
}
# The VM's cgroup memory limit (docs/vm.md): guest RAM + 256 MiB, + 1 GiB under TCG.
GUEST_RAM_MIB = 256
QEMU_RSS_MAX_MIB = GUEST_RAM_MIB + 256 + 1024


def memory_bomb(env, lang):
    label = f"memory_bomb_{lang}"
    timeout = 60
    run = Run(env, ["run", "--no-serve", "--json", "--lang", lang, "--timeout", str(timeout), "-"],
              MEMORY_BOMB[lang].encode())
    run.wait(timeout + 120, label)
    r = run.report()
    status = r.get("status")
    # docs/cli.md: `memory_limit`, exit 137: the guest kernel's OOM killer ended the runner
    # (the guest agent sees its SIGKILL and the kernel's oom_kill count rise).
    expect(run, r, "memory_limit", 137, label)
    err = r.get("error") or {}
    check(err.get("code") == "memory_limit", f"{label}: error code memory_limit", brief(r))
    check(status != "timeout", f"{label}: ended by itself before the {timeout} s timeout")
    bounded(run, label, timeout + SLACK_S)
    finish(run, label)
    peak = max(run.watch.qemu_rss_kib.values() or [0]) / 1024
    # As root QEMU is in the VM's memory cgroup (limit QEMU_RSS_MAX_MIB); rootless there is no
    # cgroup (assert_limits: the agent warned), so nothing on the host enforces that limit:
    # the same bound then holds only because the guest has GUEST_RAM_MIB of RAM. Both asserted.
    bound = ("the VM's cgroup memory limit" if run.limits == "cgroups" else
             "the VM's memory limit, which rootless no cgroup enforces: the guest's "
             f"{GUEST_RAM_MIB} MiB of RAM kept it there")
    log(f"{label}: QEMU's peak RSS {peak:.0f} MiB, bound {QEMU_RSS_MAX_MIB} MiB: {bound}")
    check(peak < QEMU_RSS_MAX_MIB, f"{label}: QEMU's RSS stayed under {bound} "
          f"({peak:.0f} < {QEMU_RSS_MAX_MIB} MiB)")


def scenario_memory_bomb_python(env):
    memory_bomb(env, "python")


def scenario_memory_bomb_js(env):
    memory_bomb(env, "javascript")


# ---- 3. 10 GiB to stdout -----------------------------------------------------------------------

FLOOD_10G = ("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(10 * 1024):\n"
             "    sys.stdout.write(chunk)\nsys.stdout.flush()\n'finished'\n").encode()
FLOOD_256M = FLOOD_10G.replace(b"10 * 1024", b"256")


def scenario_stdout_flood(env):
    # a. --json: the report holds exactly the limit; the run ends at its timeout.
    label, timeout = "stdout_flood --json", 15
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", str(timeout),
                    "-"], FLOOD_10G)
    run.wait(timeout + 120, label)
    r = run.report()
    expect(run, r, "timeout", 124, label)
    got = len(r.get("stdout", "")) + len(r.get("stderr", ""))
    check(got == OUTPUT_LIMIT_DEFAULT and r.get("stdout", "").startswith("x" * 4096),
          f"{label}: exactly the output limit came back ({got} bytes)")
    check(r.get("output_truncated") is True,
          f"{label}: output_truncated although no done came (the output reached the limit)",
          brief(r))
    bounded(run, label, timeout + SLACK_S)
    finish(run, label)

    # b. streamed into a pipe the test reads: the same limit, live. 15 s as in a: with 10 s
    # the guest wrote only 10420224 bytes by the timeout on this machine at load 7 (TCG).
    label, timeout = "stdout_flood streamed", 15
    run = Run(env, ["run", "--no-serve", "--lang", "python", "--timeout", str(timeout), "-"],
              FLOOD_10G, keep=0)
    run.wait(timeout + 120, label)
    check(run.rc == 124, f"{label}: exit 124 (got {run.rc})", run.stderr())
    check(run.out.count == OUTPUT_LIMIT_DEFAULT,
          f"{label}: exactly the output limit reached our stdout ({run.out.count} bytes)")
    check("sandbox: timeout: " in run.stderr(), f"{label}: the timeout said on stderr",
          run.stderr())
    bounded(run, label, timeout + SLACK_S)
    finish(run, label)

    # c. a flood that completes: output_truncated where the guest's done can say it.
    label = "stdout_flood 256 MiB"
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", "120", "-"],
              FLOOD_256M)
    run.wait(240, label)
    r = run.report()
    expect(run, r, "ok", 0, label)
    check(r.get("output_truncated") is True, f"{label}: output_truncated", brief(r))
    check(len(r.get("stdout", "")) == OUTPUT_LIMIT_DEFAULT, f"{label}: exactly the limit kept")
    finish(run, label)


# ---- 4. disk fill ------------------------------------------------------------------------------

DISK_FILL = b"""import errno, os
chunk = b"\\xa5" * (1 << 20)
n = 0
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(chunk)
            f.flush()
            n += 1
except OSError as e:
    print("stopped", errno.errorcode.get(e.errno), n)
st = os.statvfs("/tmp")
print("free", st.f_bavail * st.f_frsize)
n
"""


def tree_bytes(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def writable_host_files(pid):
    """Regular files (not memfds, not devices) that process @pid holds open for writing."""
    out = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            flags = int(read(f"/proc/{pid}/fdinfo/{fd}").split("flags:")[1].split()[0], 8)
        except (OSError, AttributeError, IndexError, ValueError):
            continue
        if not target.startswith("/") or target.startswith(("/memfd:", "/dev/")):
            continue
        if flags & os.O_ACCMODE != os.O_RDONLY:
            out.append((fd, target, oct(flags)))
    return out


def scenario_disk_fill(env):
    label = "disk_fill"
    watched = {"private dir": env.dir, "snapshot cache": env.snapshots, "/dev/shm": "/dev/shm"}
    before = {k: tree_bytes(v) for k, v in watched.items()}
    grew = {k: 0 for k in watched}
    writable, fds_checked = [], 0
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", "60", "-"],
              DISK_FILL)
    end = time.monotonic() + 180
    while run.proc.poll() is None and time.monotonic() < end:
        for k, v in watched.items():
            grew[k] = max(grew[k], tree_bytes(v) - before[k])
        for q in run.watch.of_kind("qemu"):
            if q.alive():
                writable += writable_host_files(q.pid)
                fds_checked += 1
        time.sleep(0.1)
    run.wait(60, label)
    r = run.report()
    expect(run, r, "ok", 0, label)
    check(r.get("stdout", "").startswith("stopped ENOSPC "), f"{label}: the guest's /tmp filled "
          "up (ENOSPC)", r.get("stdout"))
    filled = int(r.get("result") or 0)
    log(f"{label}: the guest wrote {filled} MiB; host growth while it ran: "
        + ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in grew.items()))
    for k, v in grew.items():
        check(v < 4 * MIB, f"{label}: {k} did not grow ({v / MIB:.1f} MiB)")
    check(fds_checked > 0, f"{label}: QEMU's open files were looked at while it ran")
    check(not writable, f"{label}: QEMU holds no host file open for writing", writable)
    finish(run, label)


# ---- 5. endless loop ---------------------------------------------------------------------------

def scenario_endless_loop(env):
    label, timeout = "endless_loop", 3
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", str(timeout),
                    "-"], b"while True:\n    pass\n")
    run.wait(timeout + 120, label)
    r = run.report()
    expect(run, r, "timeout", 124, label)
    check((r.get("error") or {}).get("code") == "timeout", f"{label}: error code timeout",
          brief(r))
    d = r.get("duration_ms") or 0
    check(timeout * 1000 <= d <= timeout * 1000 + 2000,
          f"{label}: duration_ms {d} is the timeout (+ at most 2 s)")
    bounded(run, label, timeout + SLACK_S)
    finish(run, label)


# ---- 6. 300 parallel tool calls under the host-wide cap ----------------------------------------

TOOL_CAP = 3
TOOL_FLOOD = b"""const N = 300;
const rs = await Promise.all(Array.from({length: N}, (_, i) => tools.slow.work({i, sleep_ms: 20})));
const bad = rs.filter((r, i) => r.i !== i).length;
console.log(`done ${rs.length} bad ${bad}`);
rs.length
"""


def scenario_tool_flood(env):
    label = "tool_flood"
    log_path = env.path("tool.log")
    catalog = tools_catalog(env, log_path)
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "javascript", "--timeout", "180",
                    "--tools", catalog, "-"], TOOL_FLOOD,
              extra={"SANDBOX_TOOL_PROCS": str(TOOL_CAP)})
    run.wait(300, label)
    r = run.report()
    expect(run, r, "ok", 0, label)
    check(r.get("stdout") == "done 300 bad 0\n", f"{label}: every call answered with its own "
          "result", r.get("stdout"))
    calls = r.get("tool_calls") or []
    check(len(calls) == 300 and all(c.get("answered") and c.get("ok") for c in calls),
          f"{label}: 300 calls recorded, all answered ok",
          [c for c in calls if not c.get("ok")][:3])
    events = tool_log(log_path)
    starts = [e for e in events if e[0] == "start"]
    check(len(starts) == 300 and len(events) == 600, f"{label}: the tool ran 300 times "
          f"({len(starts)} starts, {len(events) - len(starts)} ends)")
    # Concurrency from the tool's own times: each process counted from its start to its end.
    running, most = 0, 0
    for kind, _, _ in sorted(events, key=lambda e: (e[2], e[0] == "start")):
        running += 1 if kind == "start" else -1
        most = max(most, running)
    seen = run.watch.max_alive.get("slot-tool", 0)
    log(f"{label}: SANDBOX_TOOL_PROCS={TOOL_CAP}: at most {most} tool runs overlapped (the "
        f"tool's log), at most {seen} tool processes alive at once (/proc every 20 ms); "
        f"{run.t_exit - run.t0:.1f} s")
    check(1 <= most <= TOOL_CAP, f"{label}: tool runs overlapped at most {TOOL_CAP} ({most})")
    check(seen <= TOOL_CAP, f"{label}: at most {TOOL_CAP} tool processes alive at once ({seen})")
    finish(run, label)


# ---- 7. a reader that never reads --------------------------------------------------------------

FLOOD_FOREVER = b"import sys\nb = 'x' * 65536\nwhile True:\n    sys.stdout.write(b)\n"
FLUSH_STALL_S = 2  # SBX_WRITER_FLUSH_STALL_MS


def slow_reader(env, label, extra_args, said, timeout):
    r_end, w_end = os.pipe()  # nobody reads r_end while the run goes on
    try:
        run = Run(env, ["run", "--no-serve", "--lang", "python", "--timeout", str(timeout),
                        *extra_args, "-"], FLOOD_FOREVER, stdout=w_end)
        os.close(w_end)
        w_end = None
        run.wait(timeout + FLUSH_STALL_S + 120, label)
    finally:
        if w_end is not None:
            os.close(w_end)
        os.close(r_end)
    text = run.stderr()
    check(run.rc == 124, f"{label}: exit 124 (got {run.rc})", text)
    check(f"sandbox: timeout: execution timed out after {timeout * 1000} ms" in text,
          f"{label}: the timeout said on stderr", text)
    queued = re.search(r"gave up on (\d+) bytes", text)
    hint = "" if said in text else (
        f" (only {int(queued.group(1)) / MIB:.1f} MiB were queued at the timeout, under the "
        f"16 MiB cap: the guest too slow for {timeout} s, a loaded machine?)" if queued else
        " (nothing was queued at the timeout: the guest wrote no more than the pipe holds)")
    check(said in text, f"{label}: stderr says {said!r}{hint}", text)
    bounded(run, label, timeout + FLUSH_STALL_S + SLACK_S)
    qemu_gone = [q.gone_at for q in run.watch.of_kind("qemu") if q.gone_at]
    if check(qemu_gone, f"{label}: QEMU seen gone"):
        ahead = run.t_exit - max(qemu_gone)
        log(f"{label}: QEMU gone {ahead:.1f} s before the exit (the flush wait)")
        check(ahead >= FLUSH_STALL_S - 0.5, f"{label}: the VM was gone before the flush wait "
              f"(only {ahead:.1f} s before the exit)")
    finish(run, label)


def scenario_slow_reader(env):
    # The timeouts are what the guest needs to write that much under TCG on a loaded 2-core
    # machine (~6 MiB/s at load 3-4 here, ~1.5 MiB/s at load 7, Python's start-up first).
    # The default limit (10 MiB) fits the writer's queue (16 MiB): it waits, then gives up.
    # Something must be queued at the timeout (more than the 64 KiB pipe): with 3 s the guest
    # had not got that far once at load 7.
    slow_reader(env, "slow_reader", [], "sandbox: gave up on ", 5)
    # A higher limit: the queue's own bound (16 MiB) drops the rest; memory stays bounded.
    # The guest must first write more than 16 MiB: 3 s and 8 s were not enough at load 4-7
    # ("gave up on 11665408 bytes", "11796480 bytes").
    slow_reader(env, "slow_reader --output-limit 1G", ["--output-limit", "1G"],
                "does not keep up", 12)


# ---- 8. escape sequences to a terminal ---------------------------------------------------------

TERMINAL_JS = (
    b'process.stdout.write("\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\x1b[31mred\\rover\\x7f'
    b'\\u009b1m\\x00 tab\\tok \\u00e9\\n");\n'
    b'console.error("err \\x1b[5mblink\\x08");\n'
    b'throw new Error("boom \\x1b]0;title\\x07 \\x1b[2J");\n')


def raw_terminal_bytes_ok(data):
    """No C0 control but \\n and \\t, no DEL, no C1 control (UTF-8 c2 80..c2 9f)."""
    bad = [b for b in data if (b < 0x20 and b not in (0x0a, 0x09)) or b == 0x7f]
    return not bad and not re.search(rb"\xc2[\x80-\x9f]", data), bad[:10]


TERMINAL_PY = (b"import sys\nsys.stdout.buffer.write("
               b"b'raw \\x1b[2J\\xff\\xfe \\xc2\\x9b \\x1bc \\xc3\\xa9\\n')\n")


def on_terminal(env, lang, code, label):
    """Run @code with stdout and stderr on one pseudo-terminal (raw: what `sandbox` writes is
    what we read); (the run, the bytes the terminal got)."""
    master, term = pty.openpty()
    tty.setraw(term)
    shown = b""
    try:
        run = Run(env, ["run", "--no-serve", "--lang", lang, "-"], code, stdout=term,
                  stderr=term)
        os.close(term)
        term = None
        end = time.monotonic() + 150
        while time.monotonic() < end:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break  # EIO: every holder of the terminal side is gone
                if not chunk:
                    break
                shown += chunk
            elif run.proc.poll() is not None:
                break
        run.wait(30, label)
    finally:
        if term is not None:
            os.close(term)
        os.close(master)
    log(f"{label}: the terminal shows {shown!r}")
    return run, shown


def terminal_text(shown):
    return shown.decode(errors="replace")


def scenario_terminal(env):
    label = "terminal"
    run, shown = on_terminal(env, "javascript", TERMINAL_JS, label)
    check(run.rc == 1, f"{label}: exit 1 (an uncaught error) (got {run.rc})")
    finish(run, label, stderr_text=terminal_text(shown))
    # Raw bytes from Python: invalid UTF-8, a C1 control as its two UTF-8 bytes.
    run, more = on_terminal(env, "python", TERMINAL_PY, label + " (python)")
    check(run.rc == 0, f"{label} (python): exit 0 (got {run.rc})")
    finish(run, label + " (python)", stderr_text=terminal_text(more))
    shown += more
    ok, bad = raw_terminal_bytes_ok(shown)
    check(ok, f"{label}: no raw control byte reached the terminal {bad}", shown)
    for visible in (rb"\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b[31mred\x0dover\x7f\u009b1m\x00 tab"
                    + b"\tok " + "é".encode() + b"\n", rb"err \x1b[5mblink\x08" b"\n",
                    rb"boom \x1b]0;title\x07 \x1b[2J",
                    rb"raw \x1b[2J\xff\xfe \u009b \x1bc" + " é\n".encode()):
        check(visible in shown, f"{label}: shown escaped: {visible!r}", shown)


# ---- 9. SIGKILL of `sandbox run` ---------------------------------------------------------------

def runtime_vm_dirs(env):
    return sorted(d for d in os.listdir(env.runtime) if d.startswith("sbx-vm-"))


def later_agent_sweeps(env, run, label):
    """What a SIGKILLed agent left (its VMs' runtime dirs, their cgroups) the next agent removes
    (docs/vm.md: rundir.c, "Resource limits"): the dirs once their lock is free and 10 s old
    (aged here, not waited for), the cgroups of a dead agent's pid at once."""
    for name in os.listdir(env.runtime):
        if name.startswith("sbx-vm-") and name.endswith(".lock"):
            old = time.time() - 60
            os.utime(os.path.join(env.runtime, name), (old, old))
    nxt = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "-"], b"print(1)\n")
    nxt.wait(180, label + ": the next run")
    expect(nxt, nxt.report(), "ok", 0, label + ": the next run")
    finish(nxt, label + ": the next run")
    left = runtime_vm_dirs(env)
    check(not left, f"{label}: the next agent removed the killed one's runtime dirs", left)
    cgroups = [d for d in run.watch.cgroup_dirs if os.path.exists(d)]
    check(not cgroups, f"{label}: the next agent removed the killed one's cgroups", cgroups)


def after_agent_sigkill(env, run, label, before_shm):
    """The checks after a SIGKILLed agent, then what the next agent must clean up."""
    finish(run, label, killed=True)
    new_shm = shm_entries() - before_shm
    check(not new_shm, f"{label}: no new /dev/shm entry", sorted(new_shm))
    later_agent_sweeps(env, run, label)
    for d in runtime_vm_dirs(env):
        shutil.rmtree(os.path.join(env.runtime, d), ignore_errors=True)
    # docs/tools.md: after a SIGKILL a slot's lock file stays (the next holder removes it).
    slots = os.path.join(env.runtime, "sandbox-tool-slots")
    if os.path.isdir(slots):
        log(f"{label}: left, as documented after a SIGKILL: {os.listdir(slots)} in {slots}")
        shutil.rmtree(slots, ignore_errors=True)
    remove_cgroup_dirs(run.watch.cgroup_dirs)


def scenario_sigkill_run(env):
    label = "sigkill_run"
    log_path = env.path("tool.log")
    catalog = tools_catalog(env, log_path)
    before_shm = shm_entries()
    # A tool call in flight (its process sleeps 60 s) while the VM runs.
    code = b"print('up', flush=True)\ntools.slow.work({'i': 1, 'sleep_ms': 60000})\n"
    run = Run(env, ["run", "--no-serve", "--lang", "python", "--timeout", "120", "--tools",
                    catalog, "-"], code, marker=b"up\n")
    run.watch.wait_for(lambda: run.out.marker_at and any(e[0] == "start" for e in
                                                          tool_log(log_path)),
                       120, f"{label}: program and tool up")
    tool_pids = [e[1] for e in tool_log(log_path) if e[0] == "start"]
    run.watch.wait_for(lambda: any(p.pid in tool_pids for p in run.watch.all()), 5,
                       f"{label}: the tool process {tool_pids} seen under the agent")
    vm_dirs = runtime_vm_dirs(env)
    check(vm_dirs, f"{label}: the VM's runtime dir exists while it runs")
    tree = run.watch.all()
    log(f"{label}: before the SIGKILL: {tree}, runtime dirs {vm_dirs}, cgroups "
        f"{sorted(run.watch.cgroup_dirs)}")
    check(run.watch.of_kind("bwrap") and run.watch.of_kind("qemu"),
          f"{label}: bwrap and QEMU seen under the agent", tree)
    run.proc.kill()
    run.wait(10, label)
    check(run.rc == -signal.SIGKILL, f"{label}: the agent died of SIGKILL ({run.rc})")
    after_agent_sigkill(env, run, label, before_shm)


# ---- 10. SIGKILL of `sandbox serve` ------------------------------------------------------------

def scenario_sigkill_serve(env):
    label = "sigkill_serve"
    before_shm = shm_entries()
    sock_dir = env.path("serve")
    sock = os.path.join(sock_dir, "sandbox.sock")
    serve = Run(env, ["serve", "--pool", "2", "--socket", sock], None, stdout=subprocess.DEVNULL)
    status = {}

    def ready():
        status.update(serve_status(sock) or {})
        return status.get("ready") == 2 and len(status.get("prestarted_pids") or []) >= 1

    serve.watch.wait_for(ready, 120, f"{label}: a pool of 2 ready and a pre-started QEMU")
    shown = {k: status.get(k) for k in ("ready", "ready_pids", "prestarted_pids")}
    log(f"{label}: status {json.dumps(shown)}")
    # A run in flight through the server when it dies: its tool call (run by the server, in
    # the server's environment) says when the program runs.
    log_path = env.path("tool.log")
    catalog = tools_catalog(env, log_path)
    client = Run(env, ["run", "--json", "--lang", "python", "--tools", catalog, "-"],
                 b"tools.slow.work({'i': 1})\nimport time\ntime.sleep(60)\n",
                 extra={"SANDBOX_SERVE_SOCKET": sock})
    serve.watch.wait_for(lambda: any(e[0] == "end" for e in tool_log(log_path)), 60,
                         f"{label}: the client's run is up")
    tree = serve.watch.all()
    log(f"{label}: before the SIGKILL: {tree}, runtime dirs {runtime_vm_dirs(env)}, cgroups "
        f"{sorted(serve.watch.cgroup_dirs)}")
    check(len(serve.watch.of_kind("qemu")) >= 3, f"{label}: 2 pooled + 1 running (+ pre-started) "
          "QEMUs seen under serve", tree)
    t_kill = time.monotonic()
    serve.proc.kill()
    serve.wait(10, label)
    client.wait(30, f"{label}: the client")
    r = client.report()
    check(r.get("start") == "pool", f"{label}: the client's run went through the server",
          brief(r))
    expect(client, r, "crash", 125, f"{label}: the client of a server that died")
    log(f"{label}: the client exited {client.t_exit - t_kill:.1f} s after the SIGKILL")
    check(client.t_exit - t_kill <= SLACK_S, f"{label}: the client exited within {SLACK_S} s")
    hwm = client.watch.hwm_kib / 1024
    check(0 < hwm < HOST_RSS_MAX_MIB, f"{label}: the client stayed under {HOST_RSS_MAX_MIB} MiB "
          f"({hwm:.1f} MiB)")
    check(not client.watch.all(), f"{label}: the client started no process of its own",
          client.watch.all())
    after_agent_sigkill(env, serve, label, before_shm)
    # docs/pool.md: a socket left by a dead server is replaced by the next one.
    if os.path.exists(sock):
        log(f"{label}: left, as documented (the next server replaces it): {sock}")
    shutil.rmtree(sock_dir, ignore_errors=True)


# ---- 11. SIGKILL of QEMU -----------------------------------------------------------------------

def scenario_kill_qemu(env):
    label = "kill_qemu"
    log_path = env.path("tool.log")
    catalog = tools_catalog(env, log_path)
    code = (b"tools.slow.work({'i': 1})\nprint('up', flush=True)\nimport time\n"
            b"time.sleep(60)\n")
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", "120",
                    "--tools", catalog, "-"], code)
    run.watch.wait_for(lambda: any(e[0] == "end" for e in tool_log(log_path)), 120,
                       f"{label}: the program running (its tool call done)")
    time.sleep(0.5)
    qemus = [q for q in run.watch.of_kind("qemu") if q.alive()]
    t_kill = time.monotonic()
    if check(len(qemus) == 1, f"{label}: one QEMU running", qemus):
        q = qemus[0]
        if start_time(q.pid) == q.start:  # still that process
            os.kill(q.pid, signal.SIGKILL)
    run.wait(60, label)
    r = run.report()
    expect(run, r, "crash", 125, label)
    log(f"{label}: ended {run.t_exit - t_kill:.2f} s after the kill: {brief(r)}")
    check(run.t_exit - t_kill <= 5, f"{label}: ended within 5 s of QEMU's death "
          f"({run.t_exit - t_kill:.1f} s)")
    # The channel's EOF comes before QEMU's exit is seen: the core waits for it (exec.c,
    # SBX_EXEC_VM_EXIT_GRACE_MS), so the report says the VM died rather than blame the guest.
    message = (r.get("error") or {}).get("message") or ""
    check("the VM exited" in message and "signal 9" in message,
          f"{label}: the report says QEMU died (killed by signal 9)", brief(r))
    finish(run, label)


# ---- 12. the jail ------------------------------------------------------------------------------

def scenario_jail(env):
    """QEMU (and, on the q35 profile, the bridge) jailed: checked by every scenario through
    hostile_lib.assert_jail; here on its own, on the default profile and over the bridge."""
    for profile in (None, "q35"):
        label = f"jail{'@' + profile if profile else ''}"
        argv = ["run", "--no-serve", "--json", "--lang", "python"]
        argv += ["--profile", profile] if profile else []
        run = Run(env, argv + ["-"], b"import time\ntime.sleep(2)\nprint('ok')\n")
        run.wait(300, label)
        r = run.report()
        expect(run, r, "ok", 0, label)
        if profile == "q35":
            check(run.watch.of_kind("bridge"), f"{label}: the bridge seen under the agent",
                  run.watch.all())
        for b in run.watch.of_kind("bwrap"):
            check(b.ppid == run.proc.pid, f"{label}: {b} is the agent's child (parent {b.ppid})")
        finish(run, label)


# ---- 13. garbage on the channel, written by root in the guest ----------------------------------

# Guest code as root (a test-only profile: sandbox.test_root=1) takes the agent's channel and
# writes garbage to the host through it. Opening the device itself does not work: the
# virtio-serial port has one opener, the agent (EBUSY, printed); the vsock connection is the
# agent's socket. So it takes a copy of the agent's descriptor with pidfd_getfd(2), which root
# may do there (ptrace_scope 2 under the flag, 3 otherwise: no one may). @MODE@ says what it
# writes; the line it prints first reaches the host (the agent's output frame) before it.
GARBAGE = r'''import ctypes, errno, os, random, select, socket, struct, sys, time
MODE = "@MODE@"


def say(*args):
    print("garbage:", *args, flush=True)


libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)


def take(target):
    fd = libc.syscall(438, pidfd, target, 0)  # pidfd_getfd: a copy of PID 1's descriptor
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_getfd")
    return fd


if os.geteuid() != 0:
    try:
        os.close(take(0))
        got = "a copy"
    except OSError as e:
        got = errno.errorcode.get(e.errno, str(e.errno))
    say(f"not root: uid {os.geteuid()}; pidfd_getfd of PID 1's fd 0: {got}")
    sys.exit(3)
chan, how = None, None
for name in sorted(os.listdir("/proc/1/fd"), key=int):
    try:
        link = os.readlink("/proc/1/fd/" + name)
    except OSError:
        continue
    if link.startswith("/dev/vport"):
        try:
            os.close(os.open(link, os.O_RDWR | os.O_NONBLOCK))
            opened = "opened"
        except OSError as e:
            opened = errno.errorcode.get(e.errno, str(e.errno))
        chan, how = take(int(name)), f"the virtio-serial port {link} (own open: {opened})"
    elif link.startswith("socket:"):
        s = socket.socket(fileno=take(int(name)))
        try:
            peer = s.getpeername() if s.family == socket.AF_VSOCK else None
        except OSError:
            peer = None
        if peer and peer[0] == 2:
            chan, how = s.detach(), f"the vsock connection to {peer}"
        s.close()
    if chan is not None:
        say(f"took {how} from PID 1's fd {name}; writing {MODE}")
        break
if chan is None:
    say("found no channel among PID 1's descriptors")
    sys.exit(3)
time.sleep(0.5)


def send(data):
    view = memoryview(data)
    while view:
        select.select([], [chan], [], 1)
        try:
            view = view[os.write(chan, view):]
        except BlockingIOError:
            pass


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


rng = random.Random(11)
if MODE == "random":
    send(frame(rng.randbytes(65536)) + rng.randbytes(1 << 20))
elif MODE == "huge_length":
    send(b"\xff\xff\xff\xff" + b"A" * 4096)
elif MODE == "zero_length":
    send(b"\0\0\0\0" + frame(b'{"type":"ping","seq":1}'))
elif MODE == "bad_json":
    send(frame(b'{"type": "output", "id": "x", "stream": "stdout", "data": '))
elif MODE == "unexpected":
    send(frame(b'{"type":"pong","seq":7}'))
elif MODE == "endless":
    send(b"\x7f")
    while True:
        send(rng.randbytes(65536))
elif MODE == "ping_flood":
    seq = 0
    while True:
        send(b"".join(frame(b'{"type":"ping","seq":%d}' % (seq + i)) for i in range(1, 257)))
        seq += 256
elif MODE == "stall":
    send(struct.pack(">I", 4 << 20) + b"[" * 100)
time.sleep(300)
'''

# mode -> (status, exit code, what error.message must hold). docs/cli.md: a guest agent that
# broke the protocol is `crash`, 125, "protocol violation: ..." (host-agent/session/session.c);
# what follows the protocol but never ends (a frame announced and never completed, valid pings
# forever) ends at the run's timeout, 124.
GARBAGE_MODES = {
    "random": ("crash", 125, "protocol violation: undecodable frame"),
    # bit 31: a data frame's header (docs/protocol.md, "Data frames"), which nothing announced
    "huge_length": ("crash", 125,
                    "protocol violation: a data frame of 2147483647 bytes that no message "
                    "announced"),
    "zero_length": ("crash", 125, "protocol violation: frame of 0 bytes announced"),
    "bad_json": ("crash", 125, "protocol violation: undecodable frame"),
    "unexpected": ("crash", 125, "protocol violation: unexpected pong 7"),
    "endless": ("crash", 125, "protocol violation: frame of "),
    "ping_flood": ("timeout", 124, "execution timed out after"),
    "stall": ("timeout", 124, "execution timed out after"),
}
# A ping flood may also end before the timeout, refused: the host queues a pong per ping and
# ends the run when the guest has not read 16 MiB of them (host-agent/session). Which comes
# first depends on how fast the guest floods (at load ~1 it filled the queue in 13.7 s of 15).
GARBAGE_ALTERNATIVES = {
    "ping_flood": ("crash", 125, "protocol violation: the guest does not read its channel"),
}
# The runs that can only end at their timeout. Long enough for the guest to have printed that
# it took the channel first: Python's start and the look through /proc/1/fd under TCG took more
# than 6 s at load 7 (CI beside other work).
GARBAGE_TIMEOUT_S = 15
GARBAGE_CRASH_TIMEOUT_S = 60  # the others: a host that does not notice would show as a timeout
GARBAGE_REFUSED_MS = 10000  # ... and they end this soon after the execute (~1 s here)
ROOT_PROFILES = {"q35-serial-root": "virtio-serial", "q35-root": "vsock-bridge"}


def root_profile_env():
    return {"SANDBOX_PROFILES_DIR": TEST_PROFILES}


def warm_up_profile(env, profile, extra=None):
    """A run on @profile first (makes its snapshot once, ~15-25 s), checked to run as root where
    the profile says so, so that the bounds below are about the scenario only."""
    t0 = time.monotonic()
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--profile", profile, "-"],
              b"import os\nprint(os.geteuid())\n", extra=extra)
    run.wait(300, f"warm-up of {profile}")
    r = run.report()
    expect(run, r, "ok", 0, f"warm-up of {profile}")
    finish(run, f"warm-up of {profile}")
    log(f"warm-up of {profile}: {time.monotonic() - t0:.1f} s; guest code's uid "
        f"{r.get('stdout', '').strip()}")
    return r


def scenario_channel_garbage(env):
    # The switch is the host's alone: no shipped profile has it, and without it the same
    # program runs as uid 1000 and cannot take the agent's descriptors (ptrace_scope 3).
    for path in sorted(glob.glob(os.path.join(TOP, "qemu-profiles", "*.json"))):
        check("sandbox.test_root" not in (read(path) or ""),
              f"channel_garbage: the shipped profile {os.path.basename(path)} does not set "
              "sandbox.test_root")
    label = "channel_garbage without the switch@q35-serial"
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--timeout", "60", "-"],
              GARBAGE.replace("@MODE@", "huge_length").encode())
    run.wait(180, label)
    r = run.report()
    log(f"{label}: {r.get('status')}, exit {run.rc}: {r.get('stdout', '').strip()}")
    said = "garbage: not root: uid 1000; pidfd_getfd of PID 1's fd 0: EPERM\n"
    check(r.get("status") == "error" and run.rc == 3 and r.get("stdout") == said,
          f"{label}: guest code is uid 1000 and may not take the agent's descriptors (exit 3)",
          brief(r) + r.get("stdout", ""))
    finish(run, label)
    for profile, channel in ROOT_PROFILES.items():
        r = warm_up_profile(env, profile, root_profile_env())
        check(r.get("stdout") == "0\n", f"channel_garbage: guest code runs as root on the "
              f"test-only profile {profile} (uid {r.get('stdout', '').strip()!r})")
        for mode, (status, rc, said) in GARBAGE_MODES.items():
            label = f"channel_garbage {mode}@{profile}"
            timeout = GARBAGE_TIMEOUT_S if status == "timeout" else GARBAGE_CRASH_TIMEOUT_S
            run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--profile",
                            profile, "--timeout", str(timeout), "-"],
                      GARBAGE.replace("@MODE@", mode).encode(), extra=root_profile_env())
            run.wait(timeout + 120, label)
            r = run.report()
            err = r.get("error") or {}
            queue_full = False
            if mode in GARBAGE_ALTERNATIVES and r.get("status") == GARBAGE_ALTERNATIVES[mode][0]:
                status, rc, said = GARBAGE_ALTERNATIVES[mode]
                queue_full = True
            log(f"{label}: {r.get('status')}, exit {run.rc}, {run.t_exit - run.t_vm():.1f} s "
                f"after the VM's start, duration_ms {r.get('duration_ms')}: "
                f"{err.get('code')}: {err.get('message')}")
            check(r.get("stdout", "").startswith("garbage: took the "),
                  f"{label}: guest code took the agent's channel", brief(r) + r.get("stdout", ""))
            if channel == "virtio-serial":
                check("(own open: EBUSY)" in r.get("stdout", ""), f"{label}: opening the port "
                      "itself failed with EBUSY (the agent holds it)", r.get("stdout"))
            expect(run, r, status, rc, label)
            code = "timeout" if status == "timeout" else "internal_error"
            check(err.get("code") == code and said in (err.get("message") or ""),
                  f"{label}: error {code}: {said!r}...", brief(r))
            # Promptly: the garbage is refused at once (the runner, its imports, 0.5 s of sleep
            # before it: ~1 s); what cannot be refused ends at the timeout, not later.
            d = r.get("duration_ms") or 0
            if status == "timeout":
                check(timeout * 1000 <= d <= timeout * 1000 + 2000,
                      f"{label}: duration_ms {d} is the timeout (+ at most 2 s)")
            elif queue_full:
                check(0 < d <= timeout * 1000 + 2000,
                      f"{label}: refused before the timeout (duration_ms {d})")
            else:
                check(0 < d <= GARBAGE_REFUSED_MS, f"{label}: refused within "
                      f"{GARBAGE_REFUSED_MS} ms of the execution's start (duration_ms {d})")
            bounded(run, label, (timeout if status == "timeout" or queue_full
                                 else GARBAGE_REFUSED_MS / 1000) + SLACK_S)
            finish(run, label)
    # The profile's bytes and the QEMU command line (with the kernel's) are part of a snapshot's
    # key (docs/snapshot.md): the test-only profiles have snapshots of their own, never those of
    # the shipped profiles (whose guests run code as uid 1000).
    made = {}
    for path in glob.glob(os.path.join(env.snapshots, "*", "inputs.json")):
        inputs = report(read(path) or "") or {}
        made.setdefault(inputs.get("profile_name"), []).append(inputs)
    for plain, root in (("q35-serial", "q35-serial-root"), ("q35", "q35-root")):
        if not made.get(plain):
            continue  # q35's snapshot is made by other scenarios (jail, vsock_scan)
        a, b = made[plain][-1], (made.get(root) or [{}])[-1]
        log(f"channel_garbage: snapshot keys {plain} {a.get('key', '')[:12]}, {root} "
            f"{b.get('key', '')[:12]}")
        check(b and a["key"] != b["key"] and a["profile_sha256"] != b["profile_sha256"] and
              a["recipe_sha256"] != b["recipe_sha256"], f"channel_garbage: {root} has a "
              f"snapshot of its own (another key, profile and command line than {plain}'s)")


# ---- 14. a vsock scan over the bridge ----------------------------------------------------------

# What the guest can reach over vsock on the bridge profiles (bridge/README.md, --uds): the
# bridge relays a guest connection to host port P to the unix socket <runtime dir>/vsock.sock_P,
# and nothing on the host listens on any such socket (the host agent only connects *in*, to the
# guest agent's port 1024: host-agent/vm/hvsock.c); every other destination CID (0, 1, another
# VM's: each VM has a bridge and a CID space of its own) gets a reset from the bridge, and the
# guest's own CID is local (no loopback transport in the guest: ENODEV). So: nothing connects.
VSOCK_SCAN = r'''import errno, fcntl, json, os, socket, struct, time
HOST_PORTS = @HOST_PORTS@
EXTRA = @EXTRA@
t0 = time.monotonic()


def own_cid():
    try:
        with open("/dev/vsock", "rb") as f:
            buf = bytearray(4)
            fcntl.ioctl(f, socket.IOCTL_VM_SOCKETS_GET_LOCAL_CID, buf)
            return struct.unpack("I", buf)[0]
    except OSError:
        return None  # /dev/vsock is root's (0600): not for uid 1000


HIGH = [4095, 4096, 5000, 8080, 10000, 32768, 49152, 65535, 65536, 1 << 20, 0x7fffffff,
        0xfffffffe, 0xffffffff]
targets = [(2, p) for p in list(range(HOST_PORTS)) + HIGH]
for cid in [0, 1] + list(range(3, 65)) + [100, 1000, 65535, 0x7fffffff, 0xfffffffe, 0xffffffff]:
    targets += [(cid, p) for p in (0, 1, 22, 1023, 1024, 1025, 5000)]
targets += [tuple(t) for t in EXTRA]
connected, results = [], {}
for cid, port in targets:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((cid, port))
        connected.append([cid, port])
        what = "connected"
    except socket.timeout:
        what = "timeout"
    except OSError as e:
        what = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
    per_cid = results.setdefault(str(cid), {})
    per_cid[what] = per_cid.get(what, 0) + 1
print(json.dumps({"uid": os.geteuid(), "own_cid": own_cid(), "probes": len(targets),
                  "connected": connected, "results": results,
                  "seconds": round(time.monotonic() - t0, 2)}))
'''
VSOCK_SCAN_BOUND_S = 180  # ~2600 probes, 1-25 ms each under TCG on a busy machine
VSOCK_SCAN_HOST_PORTS = 2049  # 0..2048; as root beside a refilling pool 0..1100 (the time)
VSOCK_SCAN_HIGH = 13


def vsock_scan_code(host_ports, extra):
    return (VSOCK_SCAN.replace("@HOST_PORTS@", str(host_ports))
            .replace("@EXTRA@", json.dumps(extra)).encode())


# Another VM: listens on vsock port 5000, says its CID, waits (a tool call that returns when the
# test creates a file) while the scan runs elsewhere, then says what reached its listener.
VSOCK_LISTENER = r'''import fcntl, socket, struct
with open("/dev/vsock", "rb") as f:
    buf = bytearray(4)
    fcntl.ioctl(f, socket.IOCTL_VM_SOCKETS_GET_LOCAL_CID, buf)
s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
s.bind((socket.VMADDR_CID_ANY, 5000))
s.listen(16)
print(f"listening cid {struct.unpack('I', buf)[0]}", flush=True)
tools.slow.work({"i": 1, "wait_for": "@WAIT_FOR@", "sleep_ms": 150000})
s.setblocking(False)
got = []
try:
    while True:
        got.append(s.accept()[1])
except BlockingIOError:
    pass
print("accepted", got, flush=True)
'''


def guest_cid_of(run):
    """The CID the host gave the VM (the bridge's --guest-cid)."""
    cids = set()
    for b in run.watch.of_kind("bridge"):
        m = re.search(r"--guest-cid (\d+)", b.cmd)
        if m:
            cids.add(int(m.group(1)))
    return cids


def by_outcome(results):
    """{"ECONNRESET x7": "0-1, 3, 5-64, ..."}: the CIDs of each outcome, runs as ranges."""
    groups = {}
    for cid, outcome in results.items():
        key = ", ".join(f"{k} x{v}" for k, v in sorted(outcome.items()))
        groups.setdefault(key, []).append(int(cid))
    out = {}
    for key, cids in groups.items():
        runs, cids = [], sorted(cids)
        for c in cids:
            if runs and c == runs[-1][1] + 1:
                runs[-1][1] = c
            else:
                runs.append([c, c])
        out[key] = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return out


def check_scan(run, r, label, host_ports, bound=VSOCK_SCAN_BOUND_S):
    expect(run, r, "ok", 0, label)
    try:
        scan = json.loads(r.get("stdout") or "")
    except ValueError:
        check(False, f"{label}: the scan printed its results", brief(r) + str(r.get("stdout")))
        return {}
    log(f"{label}: {scan['probes']} probes in {scan['seconds']} s as uid {scan['uid']}, own CID "
        f"{scan['own_cid']}; CIDs by outcome: {by_outcome(scan['results'])}")
    check(not scan["connected"], f"{label}: no vsock connection from the guest reached "
          f"anything ({scan['connected']})")
    check(scan["seconds"] < bound, f"{label}: the scan ended within {bound} s "
          f"({scan['seconds']} s)")
    host = scan["results"].get("2", {})
    check(sum(host.values()) == host_ports + VSOCK_SCAN_HIGH and not host.get("timeout"),
          f"{label}: every host port was refused at once (no probe waited for a timeout)", host)
    return scan


def scenario_vsock_scan(env):
    # a. Guest code as it always runs (uid 1000), on the bridge profile.
    label = "vsock_scan@q35"
    warm_up_profile(env, "q35")  # its snapshot (and the template's bridge) not in the run below
    run = Run(env, ["run", "--no-serve", "--json", "--lang", "python", "--profile", "q35",
                    "--timeout", "300", "-"], vsock_scan_code(VSOCK_SCAN_HOST_PORTS, []))
    run.wait(300 + 120, label)
    r = run.report()
    scan = check_scan(run, r, label, VSOCK_SCAN_HOST_PORTS)
    cids = guest_cid_of(run)
    check(len(cids) == 1, f"{label}: the VM's CID read from its bridge ({cids})")
    for cid in cids:
        check(str(cid) in scan.get("results", {}), f"{label}: its own CID {cid} was probed")
    check(run.watch.of_kind("bridge"), f"{label}: the bridge seen", run.watch.all())
    finish(run, label)

    # b. As root (the test-only profile) in one VM of a `sandbox serve` pool, while another VM
    # of the pool (another CID, the same host) listens on vsock port 5000.
    label = "vsock_scan root, another VM"
    warm_up_profile(env, "q35-root", root_profile_env())
    sock_dir = env.path("serve")
    sock = os.path.join(sock_dir, "sandbox.sock")
    serve = Run(env, ["serve", "--pool", "2", "--prestart", "0", "--profile", "q35-root",
                      "--socket", sock], None, stdout=subprocess.DEVNULL,
                extra=root_profile_env())
    status = {}

    def ready():
        status.update(serve_status(sock) or {})
        return status.get("ready") == 2

    serve.watch.wait_for(ready, 180, f"{label}: a pool of 2 q35-root VMs ready")
    log_path, wait_for = env.path("tool.log"), env.path("scan-done")
    catalog = tools_catalog(env, log_path)
    client = dict(root_profile_env(), SANDBOX_SERVE_SOCKET=sock)
    listener = Run(env, ["run", "--lang", "python", "--profile", "q35-root", "--timeout", "240",
                         "--tools", catalog, "-"],
                   VSOCK_LISTENER.replace("@WAIT_FOR@", wait_for).encode(), extra=client)

    def listening():
        return re.search(rb"listening cid (\d+)\n", bytes(listener.out.data))

    listener.watch.wait_for(lambda: listening() or listener.proc.poll() is not None, 120,
                            f"{label}: the other VM listening")
    m = listening()
    other = int(m.group(1)) if m else None
    check(other is not None, f"{label}: the other VM said its CID", listener.out.text())
    extra_targets = [[other, p] for p in (5000, 1024, 1025)] if other else []
    scanner = Run(env, ["run", "--json", "--lang", "python", "--profile", "q35-root",
                        "--timeout", "300", "-"],
                  vsock_scan_code(1101, extra_targets), extra=client)
    scanner.wait(300 + 120, label)
    r = scanner.report()
    check(r.get("start") == "pool", f"{label}: the scan ran in a pooled VM", brief(r))
    scan = check_scan(scanner, r, label, 1101)
    check(scan.get("uid") == 0, f"{label}: the scan ran as root ({scan.get('uid')})")
    own = scan.get("own_cid")
    check(other is not None and own is not None and own != other,
          f"{label}: the two VMs have different CIDs (scanner {own}, listener {other})")
    with open(wait_for, "w"):
        pass
    listener.wait(120, f"{label}: the listener")
    said = listener.out.text()
    log(f"{label}: the other VM (CID {other}) says: {said.strip()!r}")
    check(listener.rc == 0 and "accepted []" in said, f"{label}: nothing reached the other VM's "
          f"listener (exit {listener.rc})", said + listener.stderr())
    serve.proc.send_signal(signal.SIGTERM)
    serve.wait(60, f"{label}: serve after SIGTERM")
    check(serve.rc == 0, f"{label}: serve exited 0 after SIGTERM ({serve.rc})", serve.stderr())
    check(serve.watch.of_kind("bridge"), f"{label}: the pool's bridges seen", serve.watch.all())
    finish(serve, label)
    shutil.rmtree(sock_dir, ignore_errors=True)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


# ---- main and the `nobody` wrapper -------------------------------------------------------------

NOBODY = 65534


def nobody_cannot_reach(binary, env):
    """What nobody cannot read (or run) of what the scenario needs: [(path, why)]. Asked as
    nobody (os.access with nobody's real uid: modes, ACLs, every directory on the way), so that a
    tree under /root (0700) fails here, saying so, not as an obscure error of the inner run."""
    build = os.path.dirname(os.path.dirname(binary))
    need = [(os.path.abspath(__file__), "r"), (os.path.join(HERE, "hostile_lib.py"), "r"),
            (SLOT_TOOL, "r"), (TOOL_PYTHON, "x"), (binary, "x"),
            (os.environ.get("SANDBOX_BRIDGE", os.path.join(build, "bridge", "sandbox-bridge")),
             "x"),
            (os.path.join(image_dir(binary), "manifest.json"), "r"),
            (os.environ.get("SANDBOX_PROFILES_DIR") or os.path.join(TOP, "qemu-profiles"),
             "x")]
    probe = ("import os, sys\n"
             "for a in sys.argv[1:]:\n"
             "    p, m = a[1:], os.X_OK if a[0] == 'x' else os.R_OK\n"
             "    if not os.access(p, m):\n"
             "        print(a[0], p)\n")
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
            TOOL_PYTHON, "-S", "-c", probe] + [m + p for p, m in need if os.path.exists(p)]
    try:
        p = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return [("(the probe)", "did not answer within 30 s")]
    if p.returncode != 0:
        return [("(the probe)", f"rc {p.returncode}: {p.stderr.strip()[-500:]}")]
    return [(line[2:], "not executable" if line[0] == "x" else "not readable")
            for line in p.stdout.splitlines()]


def as_nobody(binary, scenario, limit_s):
    """Root: the scenario again as nobody, in a private dir of nobody's, within @limit_s (then
    SIGTERM, SIGKILL); what carries that dir in its command line afterwards is ours (left
    running) and fails the test. A SIGTERM to us (meson's timeout) ends the inner run the same
    way first: it is in a session of its own, which meson's kill of our group would miss."""
    base = tempfile.mkdtemp(prefix="sbx-hostile-nobody-", dir="/tmp")
    os.chown(base, NOBODY, NOBODY)
    os.chmod(base, 0o711)
    snaps = snapshot_dir_default(binary) + f"-{NOBODY}"
    os.makedirs(snaps, exist_ok=True)
    os.chown(snaps, NOBODY, NOBODY)
    os.chmod(snaps, 0o700)
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "LANG", "LC_ALL", "SANDBOX_ACCEL", "SANDBOX_PROFILES_DIR",
                    "SANDBOX_IMAGE_DIR", "SANDBOX_HOSTILE_STRICT", "MESON_TEST_ITERATION")}
    env.update(HOME=os.path.join(base, "home"), SANDBOX_SNAPSHOT_DIR=snaps,
               USER="nobody", LOGNAME="nobody")
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
            TOOL_PYTHON, os.path.abspath(__file__), binary, scenario, "--inner-base", base]
    unreachable = nobody_cannot_reach(binary, env)
    if unreachable:
        shutil.rmtree(base, ignore_errors=True)
        check(False, f"{scenario} as nobody: nobody (uid {NOBODY}) cannot use what the "
              "scenario needs (run the suite from a tree others can read: o+x on every "
              "directory on the way)", "\n  ".join(f"{p}: {why}" for p, why in unreachable))
        return summary()
    log(f"as nobody: {' '.join(argv)}")
    proc = subprocess.Popen(argv, env=env, cwd=base, start_new_session=True)

    def on_sigterm(signum, frame):
        raise Failure(f"{scenario} as nobody: SIGTERM (meson's timeout?) while it ran")

    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        rc = wait_or_end(proc, limit_s, f"{scenario} as nobody")
    except Failure as e:
        check(False, str(e))
        rc = None
        proc.send_signal(signal.SIGTERM)  # its handler (main) ends its runs, then it exits
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    finally:
        signal.signal(signal.SIGTERM, old)
    left = [p for p in processes_mentioning(base) if p != os.getpid()]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(base, ignore_errors=True)
    check(not left, f"{scenario} as nobody: no process left that carries its private dir", left)
    check(rc == 0, f"{scenario} as nobody: passed (rc {rc})")
    return summary()


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) \
        else default


def main():
    args = sys.argv[1:]
    if len(args) < 2 or args[1] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} SANDBOX {{{'|'.join(SCENARIOS)}}} [--as-nobody "
              "[--limit SECONDS]]", file=sys.stderr)
        return 2
    binary, scenario = os.path.abspath(args[0]), args[1]
    if not os.path.exists(os.path.join(image_dir(binary), "manifest.json")):
        print(f"SKIP: no guest image in {image_dir(binary)} (run scripts/build)")
        return 77
    base = None
    if "--as-nobody" in args:
        if IS_ROOT:
            return as_nobody(binary, scenario, float(option(args, "--limit", 500)))
        # The plain test runs this very scenario as this unprivileged uid already: running it
        # twice would double the suite's time for nothing.
        print(f"SKIP: not root: {scenario} (without @nobody) runs as uid {os.geteuid()}, "
              "rootless, already")
        return 77
    if "--inner-base" in args:
        base = option(args, "--inner-base")
        log(f"running as uid {os.geteuid()} gid {os.getegid()} groups {os.getgroups()}")
    become_subreaper()

    def on_sigterm(signum, frame):
        # meson's timeout (or the @nobody wrapper's limit): the scenario stops where it is and
        # Env.close() ends what it started (SIGKILL by pid), which is in sessions of their own
        # and would outlive us otherwise.
        raise Failure(f"{scenario}: SIGTERM (a timeout) while it ran; its processes ended")

    signal.signal(signal.SIGTERM, on_sigterm)
    t0 = time.monotonic()
    env = Env(binary, base)
    try:
        env.warm_up()
        log(f"{scenario}: warm-up (snapshot made if missing) {time.monotonic() - t0:.1f} s")
        t1 = time.monotonic()
        SCENARIOS[scenario](env)
        log(f"{scenario}: scenario {time.monotonic() - t1:.1f} s")
    except Failure as e:
        check(False, str(e))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is bounded: let it end
        env.close()
    log(f"{scenario}: {time.monotonic() - t0:.1f} s in all")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
