"""Shared pieces of the hostile-guest suite (hostile_test.py; README.md says what each asserts).

- Env: a private directory per test (XDG_RUNTIME_DIR, TMPDIR, HOME) with mode 0711 (as root
  the per-VM runtime dirs must be reachable by the jail's uid), the snapshot cache
  (mode 0700), the environment for `sandbox`; at the end, checks that nothing is left in it.
- Watch: a thread that follows one process we started (`sandbox run` or `sandbox serve`) and
  records every descendant (pid + start time, so a recycled pid is never taken for ours), the
  peak memory of the watched process and of each QEMU, and checks the jail of every QEMU and
  bridge while it runs (jail_report()).
- the checks afterwards: every recorded process gone (reaped: the test is a child subreaper,
  so what a SIGKILLed agent leaves comes to us), no runtime dir, no cgroup of the agent, no new
  /dev/shm entry.
- check() fails the test; finding() records a known product gap (README.md, "Findings"),
  fatal only with SANDBOX_HOSTILE_STRICT=1.

Only the Python standard library. Nothing here kills by name: a process is signalled only if
it is one we started or one recorded as a descendant of one (pid and start time both match).
"""
import ctypes
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

processes_mentioning = procs.processes_mentioning
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
STRICT = os.environ.get("SANDBOX_HOSTILE_STRICT") == "1"
IS_ROOT = os.geteuid() == 0
NAMESPACES = ("mnt", "pid", "net", "ipc", "uts", "cgroup", "user")
JAIL_UIDS_DEFAULT = (0x70000000, 0x70000000 + 65535)  # docs/vm.md, SANDBOX_JAIL_UIDS
MIB = 1 << 20
# Bounds on a loaded 2-core machine (each scenario adds its own timeout to it).
SLACK_S = 15           # restore + teardown + a busy neighbour
GONE_WAIT_S = 10       # processes of a SIGKILLed agent: PDEATHSIG, then our reaping
HOST_RSS_MAX_MIB = 200  # the `sandbox` process, whatever the guest does (brief: < 200 MiB)

failures = []
findings = []


class Failure(Exception):
    pass


def log(*args):
    print(*args, flush=True)


def check(cond, what, detail=""):
    """A failed assertion: recorded, printed, the test fails (the scenario goes on)."""
    if not cond:
        failures.append(what)
        log(f"FAIL: {what}" + (f"\n  {str(detail)[-3000:]}" if detail != "" else ""))
    return cond


def finding(cond, what, detail=""):
    """A known product gap (README.md "Findings"): printed; fails only in strict mode."""
    if not cond:
        findings.append(what)
        log(f"FINDING: {what}" + (f"\n  {str(detail)[-2000:]}" if detail != "" else ""))
        if STRICT:
            failures.append("finding (strict): " + what)
    return cond


def become_subreaper():
    """Orphans of what we start (a SIGKILLed agent's QEMU and bwrap) are re-parented to us, so
    we can reap them and see them gone, instead of init (which may never reap here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log("note: PR_SET_CHILD_SUBREAPER failed:", os.strerror(ctypes.get_errno()))


# ---- /proc ------------------------------------------------------------------------------------

def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if there is no such pid."""
    text = read(f"/proc/{pid}/stat")
    if text is None:
        return None
    return int(text[text.rindex(")") + 2:].split()[19])


def state_of(pid):
    text = read(f"/proc/{pid}/stat")
    return None if text is None else text[text.rindex(")") + 2:].split()[0]


def status_fields(pid):
    text = read(f"/proc/{pid}/status")
    if text is None:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def children(pid):
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        text = read(path)
        if text:
            out += [int(x) for x in text.split()]
    return out


def comm(pid):
    return (read(f"/proc/{pid}/comm") or "").strip()


def cmdline(pid):
    return (read(f"/proc/{pid}/cmdline", "rb") or b"").replace(b"\0", b" ").decode(
        errors="replace")


class Proc:
    """A process seen as a descendant: its identity is the pid and its start time."""

    def __init__(self, pid, ppid, start, name, seen):
        self.pid, self.ppid, self.start, self.comm, self.first_seen = pid, ppid, start, name, seen
        self.last_seen = seen
        self.gone_at = None
        self.cmd = cmdline(pid)[:300]

    def alive(self):
        """Still this process and not a zombie (a zombie holds nothing but its pid)."""
        return start_time(self.pid) == self.start and state_of(self.pid) not in ("Z", "X", None)

    def exists(self):
        return start_time(self.pid) == self.start

    def kind(self):
        if "slot-tool" in self.cmd:
            return "slot-tool"
        if self.comm.startswith("qemu-system"):
            return "qemu"
        if self.comm == "bwrap":
            return "bwrap"
        if self.comm.startswith("sandbox-bridge"):
            return "bridge"
        return self.comm

    def __repr__(self):
        return f"{self.kind()}[{self.pid}]"


# ---- the jail (scenario 12; run on every QEMU and bridge of every scenario) -------------------

def jail_report(proc, own_ns):
    """What /proc says about one jailed process: a list of problems (empty: the jail is in place)
    and the facts read. Uid: as root a jail uid (not 0, in SANDBOX_JAIL_UIDS' default range);
    not root: ours (rootless, in a user namespace). CapEff/CapPrm/CapBnd 0, NoNewPrivs 1,
    Seccomp 2, the seven namespaces not ours."""
    st = status_fields(proc.pid)
    if st is None or start_time(proc.pid) != proc.start:
        return None, {}
    problems, facts = [], {}
    uids = [int(u) for u in st["Uid"].split()]
    facts["uid"] = uids[0]
    if IS_ROOT:
        if any(u == 0 for u in uids):
            problems.append(f"runs as uid 0 ({st['Uid']})")
        elif "SANDBOX_JAIL_UIDS" not in os.environ and not all(
                JAIL_UIDS_DEFAULT[0] <= u <= JAIL_UIDS_DEFAULT[1] for u in uids):
            problems.append(f"uid {st['Uid']} outside the jail's range")
    elif any(u != os.geteuid() for u in uids):
        problems.append(f"uid {st['Uid']}, expected ours ({os.geteuid()}) rootless")
    for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        facts[key] = st.get(key)
        if st.get(key) is not None and int(st[key], 16) != 0:
            problems.append(f"{key} {st[key]}")
    facts["NoNewPrivs"], facts["Seccomp"] = st.get("NoNewPrivs"), st.get("Seccomp")
    if st.get("NoNewPrivs") != "1":
        problems.append(f"NoNewPrivs {st.get('NoNewPrivs')}")
    if st.get("Seccomp") != "2":
        problems.append(f"Seccomp {st.get('Seccomp')}")
    for ns in NAMESPACES:
        try:
            theirs = os.readlink(f"/proc/{proc.pid}/ns/{ns}")
        except OSError as e:
            problems.append(f"ns/{ns} unreadable: {e.strerror}")
            continue
        facts[ns] = theirs
        if theirs == own_ns[ns]:
            problems.append(f"shares our {ns} namespace ({theirs})")
    return problems, facts


def own_namespaces():
    return {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES}


def vm_cgroup_dirs(agent_pid):
    """The cgroup dirs named after @agent_pid ("vm-<pid>-<n>", docs/vm.md) that exist now."""
    pattern = f"sandbox/vm-{agent_pid}-*"
    return sorted(glob.glob(f"/sys/fs/cgroup/*/{pattern}") + glob.glob(f"/sys/fs/cgroup/{pattern}"))


def cgroup_membership(proc, agent_pid):
    """For each existing vm-<agent>-* cgroup dir of a hierarchy: is @proc in one of them?
    {hierarchy dir: bool}. Empty without cgroups (not root: the product warns and goes on)."""
    out = {}
    for d in vm_cgroup_dirs(agent_pid):
        hierarchy = d.split("/sandbox/")[0]
        procs = (read(os.path.join(d, "cgroup.procs")) or "").split()
        out[hierarchy] = out.get(hierarchy, False) or str(proc.pid) in procs
    return out


def vm_cgroups_of(pid, agent_pid):
    """The lines of /proc/PID/cgroup naming a sandbox/vm-<agent_pid>-N cgroup (whatever the
    hierarchy's mount point or the agent's own v2 cgroup: the paths are relative to our cgroup
    namespace's root, which the jail's cgroup namespace does not change for us)."""
    mark = f"/sandbox/vm-{agent_pid}-"
    return [line for line in (read(f"/proc/{pid}/cgroup") or "").splitlines() if mark in line]


# ---- the watcher ------------------------------------------------------------------------------

class Watch(threading.Thread):
    """Follows @pid (a process we started) and all its descendants every 20 ms until it exits."""

    PERIOD = 0.02

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.start_ticks = start_time(pid)
        self.procs = {}          # (pid, start) -> Proc
        self.max_alive = {}      # kind -> most processes of that kind alive in one sample
        self.hwm_kib = 0         # VmHWM of the watched process
        self.qemu_rss_kib = {}   # QEMU pid -> peak VmRSS
        self.bridge_rss_kib = {}  # bridge pid -> peak VmRSS (guest RAM pages it touched too)
        self.bridge_anon_kib = {}  # bridge pid -> peak RssAnon (its own heap and buffers)
        self.jail = {}           # (pid, start) -> (problems, facts) of the last look
        self.jail_ok = {}        # (pid, start) -> True once the jail was seen complete
        self.cgroups = {}        # (pid, start) -> membership {hierarchy: bool}
        self.proc_cgroups = {}   # (pid, start) -> its /proc/PID/cgroup lines in vm-<agent>-N
        self.cgroup_dirs = set()
        self.own_ns = own_namespaces()
        self.t0 = time.monotonic()
        self.exited_at = None
        self._halt = threading.Event()
        self.lock = threading.Lock()
        self.start()

    def run(self):
        while not self._halt.is_set():
            if start_time(self.pid) != self.start_ticks or state_of(self.pid) in ("Z", "X"):
                self.exited_at = self.exited_at or time.monotonic()
            else:
                st = status_fields(self.pid)
                if st and "VmHWM" in st:
                    self.hwm_kib = max(self.hwm_kib, int(st["VmHWM"].split()[0]))
            self.sample()
            self._halt.wait(self.PERIOD)

    def sample(self):
        now = time.monotonic()
        seen = set()
        todo = [self.pid]
        while todo:
            parent = todo.pop()
            for c in children(parent):
                s = start_time(c)
                if s is None:
                    continue
                key = (c, s)
                seen.add(key)
                with self.lock:
                    if key not in self.procs:
                        self.procs[key] = Proc(c, parent, s, comm(c), now)
                    p = self.procs[key]
                    p.last_seen = now
                    # After an exec (bwrap's child becomes QEMU) both change; the new command
                    # line shows a moment after the new name: read both every time.
                    p.comm = comm(c) or p.comm
                    p.cmd = cmdline(c)[:300] or p.cmd
                todo.append(c)
        self.cgroup_dirs.update(vm_cgroup_dirs(self.pid))
        with self.lock:
            counts = {}
            for key in seen:
                kind = self.procs[key].kind()
                counts[kind] = counts.get(kind, 0) + 1
            for kind, n in counts.items():
                self.max_alive[kind] = max(self.max_alive.get(kind, 0), n)
            for key, p in self.procs.items():
                if key not in seen and p.gone_at is None and not p.alive():
                    p.gone_at = now
                if key in seen and p.kind() in ("qemu", "bridge"):
                    self.look_at_jailed(key, p)

    def look_at_jailed(self, key, p):
        st = status_fields(p.pid)
        if p.kind() == "qemu" and st and "VmRSS" in st:
            self.qemu_rss_kib[p.pid] = max(self.qemu_rss_kib.get(p.pid, 0),
                                           int(st["VmRSS"].split()[0]))
        if p.kind() == "bridge" and st and "VmRSS" in st and "RssAnon" in st:
            self.bridge_rss_kib[p.pid] = max(self.bridge_rss_kib.get(p.pid, 0),
                                             int(st["VmRSS"].split()[0]))
            self.bridge_anon_kib[p.pid] = max(self.bridge_anon_kib.get(p.pid, 0),
                                              int(st["RssAnon"].split()[0]))
        if self.jail_ok.get(key):
            return
        problems, facts = jail_report(p, self.own_ns)
        if problems is None:
            return
        self.jail[key] = (problems, facts)
        if not problems:
            self.jail_ok[key] = True
            self.cgroups[key] = cgroup_membership(p, self.pid)
            self.proc_cgroups[key] = vm_cgroups_of(p.pid, self.pid)

    def stop(self):
        self._halt.set()
        self.join(5)
        self.sample()

    def of_kind(self, kind):
        with self.lock:
            return [p for p in self.procs.values() if p.kind() == kind]

    def all(self):
        with self.lock:
            return list(self.procs.values())

    def first_seen(self, kind):
        ps = self.of_kind(kind)
        return min(p.first_seen for p in ps) if ps else None

    def wait_for(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.02)
        check(False, f"waited {timeout} s for {what}")
        return False


def assert_jail(watch, label, expect_qemu=True):
    """Scenario 12 in each scenario: every QEMU and bridge that lived long enough was seen jailed
    (a QEMU is checked from its exec on, until its seccomp filter is in: some ms)."""
    jailed = watch.of_kind("qemu") + watch.of_kind("bridge")
    if expect_qemu:
        check(watch.of_kind("qemu"), f"{label}: a QEMU was seen under the agent",
              [(p, p.cmd) for p in watch.all()])
    for p in jailed:
        key = (p.pid, p.start)
        lived = (p.gone_at or time.monotonic()) - p.first_seen
        ok = watch.jail_ok.get(key, False)
        problems, facts = watch.jail.get(key, (["never read"], {}))
        if ok:
            whose = "a jail uid" if IS_ROOT else "ours: rootless, in a user namespace"
            log(f"{label}: jail of {p} in place: uid {facts.get('uid')} ({whose}), CapEff "
                f"{facts['CapEff']},"
                f" NoNewPrivs {facts['NoNewPrivs']}, Seccomp {facts['Seccomp']}, 7 namespaces of "
                f"its own; parent {p.ppid} ({comm_of(watch, p.ppid)})")
        elif lived >= 1.0:
            check(False, f"{label}: {p} ran {lived:.1f} s without its jail: {problems}", facts)
        else:
            log(f"{label}: {p} lived {lived:.2f} s, too short to check its jail ({problems})")
        if p.kind() == "qemu":
            parent = comm_of(watch, p.ppid)
            check(parent == "bwrap", f"{label}: {p}'s parent is bwrap (got {parent!r})")
        membership = watch.cgroups.get(key, {})
        for hierarchy, inside in sorted(membership.items()):
            finding(inside, f"{label}: {p} is not in its VM cgroup of {hierarchy} "
                    f"(sandbox/vm-{watch.pid}-N exists there but cgroup.procs lacks it)",
                    "see README.md, Findings: the join writes to a descriptor that the jail's "
                    "--info-fd 9 replaced in the child")
    return any(watch.jail_ok.get((p.pid, p.start)) for p in watch.of_kind("qemu"))


CGROUP_WARNING = "sandbox: warning: no writable cgroup hierarchy"


def assert_limits(watch, label, stderr_text):
    """The host-side limits of the VMs (docs/vm.md, "Resource limits"), the same way as root and
    not: an agent that can write a cgroup hierarchy puts each VM in sandbox/vm-<agent pid>-N
    (memory, pids, CPU); one that cannot (not root and nothing delegated: the @nobody runs
    here, "rootless") says so once on stderr (CGROUP_WARNING) and runs its VMs without
    host-side limits. Asserted either way, never skipped:
    - the warning at most once per agent process;
    - warned: no vm-<agent>-N cgroup exists at any sample and no jailed process is in one;
    - not warned: the VMs' cgroups were seen (a dir, or a jailed process's /proc/PID/cgroup).
    Root on a host without a usable hierarchy warns too (the product's documented fallback):
    that is printed as such, not failed (this host's root has a writable v1 hierarchy).
    @stderr_text: what the agent wrote to stderr (None: not captured; then only the second and
    third points, chosen by what was seen). Returns "cgroups" or "none" (rootless: no
    host-side memory, pids or CPU limit)."""
    warned = None if stderr_text is None else stderr_text.count(CGROUP_WARNING)
    seen_dirs = sorted(watch.cgroup_dirs)
    in_vm_cgroup = {p: watch.proc_cgroups.get((p.pid, p.start)) for p in
                    watch.of_kind("qemu") + watch.of_kind("bridge")
                    if watch.proc_cgroups.get((p.pid, p.start))}
    if warned is not None:
        check(warned <= 1, f"{label}: the cgroup warning printed at most once ({warned} times)",
              stderr_text)
    if warned or (warned is None and not seen_dirs and not in_vm_cgroup):
        why = "the agent warned" if warned else "stderr not captured; none seen"
        log(f"{label}: limits: none on the host ({why}: no writable cgroup hierarchy; "
            f"{'rootless, as expected' if not IS_ROOT else 'AS ROOT: this host has none'}): "
            "the VMs run without a memory, pids or CPU cgroup")
        check(not seen_dirs, f"{label}: no cgroup sandbox/vm-{watch.pid}-* although the agent "
              "has no cgroups", seen_dirs)
        check(not in_vm_cgroup, f"{label}: no jailed process in a VM cgroup although the agent "
              "has no cgroups", in_vm_cgroup)
        return "none"
    log(f"{label}: limits: cgroups {seen_dirs or sorted(set(sum(in_vm_cgroup.values(), [])))}"
        + ("" if IS_ROOT else " (not root, but a writable hierarchy was delegated)"))
    check(seen_dirs or in_vm_cgroup, f"{label}: the VMs' cgroups sandbox/vm-{watch.pid}-N seen "
          "(the agent did not warn that it has none)", [(p, p.cmd[:120]) for p in watch.all()])
    return "cgroups"


def comm_of(watch, pid):
    for p in watch.all():
        if p.pid == pid:
            return p.comm
    return comm(pid) if pid != watch.pid else "sandbox"


# ---- the environment --------------------------------------------------------------------------

def snapshot_dir_default(binary):
    """<build>/tests/hostile/snapshots[-<uid>]: a private cache of this suite (mode 0700),
    persistent like build/snapshots, so only the first run of an image makes snapshots."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    suffix = "" if IS_ROOT else f"-{os.geteuid()}"
    return os.path.join(build, "tests", "hostile", "snapshots" + suffix)


def image_dir(binary):
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    return os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(build, "image"))


class Env:
    """A private dir (0711) holding the runtime parent, TMPDIR, HOME and state directory (the
    records' database: each `sandbox serve` locks its own) of one scenario."""

    def __init__(self, binary, base=None):
        self.binary = binary
        # Not under $TMPDIR: scripts/test's is 0700, and as root the VMs' runtime dirs must be
        # reachable by their uid (docs/vm.md, XDG_RUNTIME_DIR).
        self.dir = base or tempfile.mkdtemp(prefix="sbx-hostile-", dir="/tmp")
        os.chmod(self.dir, 0o711)
        self.runtime = os.path.join(self.dir, "rt")
        self.tmp = os.path.join(self.dir, "tmp")
        self.home = os.path.join(self.dir, "home")
        for d in (self.runtime, self.tmp, self.home):
            os.makedirs(d, exist_ok=True)
        os.chmod(self.runtime, 0o711)
        os.chmod(self.tmp, 0o700)
        os.chmod(self.home, 0o700)
        self.snapshots = os.environ.get("SANDBOX_SNAPSHOT_DIR") or snapshot_dir_default(binary)
        os.makedirs(self.snapshots, exist_ok=True)
        os.chmod(self.snapshots, 0o700)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.runtime, TMPDIR=self.tmp, HOME=self.home,
                        SANDBOX_SNAPSHOT_DIR=self.snapshots,
                        SANDBOX_STATE_DIR=os.path.join(self.dir, "state"))
        self.env.setdefault("SANDBOX_ACCEL", "tcg")
        self.env.pop("SANDBOX_SERVE_SOCKET", None)
        self.shm_before = shm_entries()
        self.extra_cleanup = []
        self.started = []  # every `sandbox` we started (start()): our children

    def path(self, name):
        return os.path.join(self.dir, name)

    def leftovers(self):
        out = []
        for root, dirs, files in os.walk(self.runtime):
            out += [os.path.join(root, n) for n in dirs + files]
        return sorted(out)

    def warm_up(self):
        """One tiny run, so that a missing snapshot is made before the measured run (~15 s
        once per image) and the bounds below are about the scenario only."""
        p = subprocess.run([self.binary, "run", "--no-serve", "--lang", "python", "--json", "-"],
                           input=b"1", capture_output=True, env=self.env, timeout=300,
                           start_new_session=True)
        if p.returncode != 0:
            raise Failure(f"warm-up run failed: rc {p.returncode}: {p.stderr.decode()[-2000:]}")

    def close(self):
        """No process carrying our private dir in its command line (every bwrap, QEMU and
        bridge gets paths in it), nothing left in the runtime dir or /dev/shm; then remove
        the private dir. A `sandbox` of ours still running (the scenario was interrupted: a
        failure, a SIGTERM) is SIGKILLed first: its jailed processes follow (PDEATHSIG)."""
        running = [p for p in self.started if p.poll() is None]
        check(not running, "every sandbox process we started had exited",
              [(p.pid, p.args[1:3]) for p in running])
        for p in running:  # our unreaped children: the pid is theirs
            p.kill()
        for p in running:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        def others():  # as nobody our own command line carries the dir (--inner-base)
            return [p for p in processes_mentioning(self.dir) if p != os.getpid()]

        end = time.monotonic() + (GONE_WAIT_S if running else 0)
        while others() and time.monotonic() < end:
            time.sleep(0.1)
        pids = others()
        check(not pids, "no process left that carries the private dir",
              [(p, cmdline(p)[:200]) for p in pids])
        for pid in pids:  # ours by construction
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        left = self.leftovers()
        check(not left, "nothing left in the private XDG_RUNTIME_DIR", left)
        new_shm = shm_entries() - self.shm_before
        check(not new_shm, "no new /dev/shm entry", sorted(new_shm))
        for fn in self.extra_cleanup:
            fn()
        shutil.rmtree(self.dir, ignore_errors=True)


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# ---- starting, waiting, ending ----------------------------------------------------------------

class Reader(threading.Thread):
    """Reads a pipe to its end: keeps the first @keep bytes, counts all of them, and notes
    when a marker shows up."""

    def __init__(self, f, keep=1 << 24, marker=None):
        super().__init__(daemon=True)
        self.f, self.keep, self.marker = f, keep, marker
        self.data, self.count, self.marker_at = bytearray(), 0, None
        self.start()

    def run(self):
        while True:
            chunk = self.f.read1(1 << 20) if hasattr(self.f, "read1") else self.f.read(1 << 20)
            if not chunk:
                return
            self.count += len(chunk)
            if len(self.data) < self.keep:
                self.data += chunk[: self.keep - len(self.data)]
            if self.marker and self.marker_at is None and self.marker in self.data:
                self.marker_at = time.monotonic()

    def text(self):
        return bytes(self.data).decode(errors="replace")


def start(env, argv, stdin_data=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, extra=None):
    """Popen `sandbox ...` in a session of its own (no terminal: an approval would not ask)."""
    e = dict(env.env, **(extra or {}))
    proc = subprocess.Popen([env.binary, *argv], stdin=subprocess.PIPE, stdout=stdout,
                            stderr=stderr, env=e, cwd=TOP, start_new_session=True)
    env.started.append(proc)
    if stdin_data is not None:
        proc.stdin.write(stdin_data)
    proc.stdin.close()
    return proc


def wait_or_end(proc, timeout, what):
    """@proc's exit status within @timeout s; else a failure, SIGTERM (its own cleanup), then
    SIGKILL; never unbounded."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: did not exit within {timeout} s")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        return None


def reap_and_wait_gone(procs, timeout, what):
    """Wait (bounded) until none of @procs is alive, reaping those re-parented to us; what is
    still alive then is a failure, and is SIGKILLed by pid (it is ours: pid and start time)."""
    end = time.monotonic() + timeout
    while True:
        for p in procs:
            try:
                os.waitpid(p.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        alive = [p for p in procs if p.alive()]
        if not alive or time.monotonic() > end:
            break
        time.sleep(0.05)
    check(not alive, f"{what}: processes still running {timeout} s later",
          [(p, p.cmd[:200]) for p in alive])
    for p in alive:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
    # Zombies re-parented to us: reap what is left (bounded).
    end = time.monotonic() + 5
    while time.monotonic() < end and any(p.exists() and state_of(p.pid) == "Z" for p in procs):
        for p in procs:
            try:
                os.waitpid(p.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.05)
    return not alive


def check_cgroups_gone(agent_pid, label, killed=False, wait_s=5):
    """No cgroup dir of the agent left (bounded wait). After a SIGKILL of the agent they stay
    until the next agent sweeps them (asserted by hostile_test.later_agent_sweeps); what holds at
    once is asserted here: no process in them."""
    end = time.monotonic() + wait_s
    while vm_cgroup_dirs(agent_pid) and time.monotonic() < end:
        time.sleep(0.1)
    left = vm_cgroup_dirs(agent_pid)
    if not killed:
        check(not left, f"{label}: no cgroup sandbox/vm-{agent_pid}-* left", left)
    else:
        # Left until the next agent's first VM sweeps them (hostile_test.later_agent_sweeps).
        if left:
            log(f"{label}: left until the next agent sweeps them: {left}")
        for d in left:
            procs = (read(os.path.join(d, "cgroup.procs")) or "").split()
            check(not procs, f"{label}: no process in the left cgroup {d}", procs)
    return left


def remove_cgroup_dirs(dirs):
    """Remove empty leaves we caused (only vm-<pid of a process we started>-N; never sandbox/)."""
    for d in sorted(dirs, reverse=True):
        try:
            os.rmdir(d)
        except OSError as e:
            log(f"note: could not remove {d}: {e.strerror}")


def report(proc_out):
    try:
        return json.loads(proc_out)
    except ValueError:
        return None


# ---- the serve socket (docs/pool.md, "Client protocol") ---------------------------------------

def serve_status(path, timeout=2.0):
    """The server's answer to {"type":"status"}, or None."""
    try:
        return procs.serve_status(path, timeout)
    except (OSError, ValueError, RuntimeError):
        return None


def summary():
    if findings:
        log(f"{len(findings)} finding(s) (README.md, Findings"
            f"{'; fatal: SANDBOX_HOSTILE_STRICT=1' if STRICT else '; not fatal by default'}):")
        for f in findings:
            log("  -", f)
    if failures:
        log(f"{len(failures)} failed:")
        for f in failures:
            log("  -", f)
        return 1
    log("PASS")
    return 0


def fail_fast(msg):
    log("FAIL:", msg)
    sys.exit(1)
