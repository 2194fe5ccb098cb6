"""What makes a Python execution differ from a run of the same code, made recordable (issue 16;
guest-image/runners/README.md, "Randomness and the clock"; docs/protocol.md, "Replay").

- Randomness: every source a program draws from comes from one generator per execution, seeded
  by the host's `execute.seed`: HMAC-SHA256 keyed by the seed in counter mode (the PRF of NIST SP
  800-108's KDF in counter mode), made by PBKDF2 with one iteration, which is that loop in C:
  chunk j = PBKDF2-HMAC-SHA256(seed, "sbx-drbg-1" || j as 8 bytes big-endian, 1, 4096 bytes),
  the stream their concatenation (runners/README.md, "Randomness"; the JavaScript runner's too).
  Without the 32-byte seed its output cannot be predicted; with it, it is the same stream. The
  cryptographic sources (os.urandom, random.SystemRandom and so secrets, uuid.uuid4, numpy's
  default_rng() and SeedSequence()) read the stream itself; the others (the random module's
  functions, random.Random() without a seed, numpy's legacy global generator) are Mersenne
  Twisters seeded from it, as Python and numpy seed them from the kernel otherwise.
- The clock: every read of the time (time.time & co., datetime.now/utcnow/today, date.today)
  goes through one function that logs the value it returns, in microseconds, or, in a replay,
  returns the logged values in order. The runner's own timing (asyncio's loop.time: timers keep
  their real timing) reads the real clock. CPU time (time.process_time, os.times) is not a
  reading of the time and is not logged. datetime's classes are C types that cannot be
  patched, nor replaced in the datetime module (C extensions such as pandas subclass them at
  import and refuse a Python base): the program's own code gets a view of the module whose
  `datetime` and `date` are subclasses that read the clock here (an import by __main__ only);
  libraries see the real module, and their datetime.now() is not logged.
- The order of asynchronous deliveries: each asyncio timer firing (loop.call_at and so
  call_later: asyncio.sleep, wait_for's and timeout()'s deadlines) and each tool result handed
  to a coroutine (tools.x.y.aio) is an event, logged in order: 2 * n for the execution's n-th
  timer, 2 * k + 1 for its k-th tool call's result. A blocking tool call (tools.x.y()) stops
  everything till its result: no event. In a replay (execute.event_log) a delivery that comes
  before its turn is held until every event logged before it was delivered; one the log does
  not have (any more) is never delivered (the original ended before it came); a replay that
  ends before delivering every logged event diverged.
- The logs go out as they grow (replay_log, before each output, each tool call and the done,
  and every BATCH_MAX entries), so a run killed later keeps what it read before anything it
  showed. With execute.log_open (the recorded run was killed there) a read or an event past
  the logs' ends waits forever instead of diverging: the replay is killed the same way.
- What cannot be made deterministic, detected where cheap: a thread or a process started, a
  read of /dev/urandom or /dev/random through open(). The first reason is kept; the done says
  replayable: false with it.
"""
import builtins
import contextvars
import datetime
import hashlib
import io
import os
import random
import sys
import threading
import time
import types

SEED_BYTES = 32  # SBX_SEED_BYTES
# SBX_CLOCK_READS_MAX (host-agent/protocol/limits.h): past it the log stops, and the execution
# is not replayable.
CLOCK_READS_MAX = 100000
# SBX_EVENT_LOG_MAX: past it the event log stops, and the execution is not replayable.
EVENT_LOG_MAX = 131072
# SBX_REPLAY_LOG_BATCH_MAX: unsent entries of either log that make a replay_log go out at once,
# so that a frame stays small.
BATCH_MAX = 4096
# SBX_REASON_MAX: the reason is cut at this many bytes by the receiver; keep it shorter.
REASON_MAX = 1000
# The stream comes in chunks of this many bytes, each one call into OpenSSL
# (hashlib.pbkdf2_hmac: 128 HMAC blocks). A hash a block made from Python cost ~200 us under TCG,
# so os.urandom(9 << 20) took a minute; in chunks it is 2304 calls.
CHUNK_BYTES = 4096
# The start of each chunk's salt: names the construction, so no other use of a seed makes this
# stream.
DRBG_LABEL = b"sbx-drbg-1"
# Taken now: a program may replace hashlib's functions, which must not change the stream.
_pbkdf2_hmac = hashlib.pbkdf2_hmac


class ReplayDivergence(Exception):
    """A replay read the clock more often than the recorded execution did."""


class Drbg:
    """HMAC-SHA256 in counter mode keyed by the seed, by chunks (see the module's comment)."""

    def __init__(self, seed):
        self.seed = bytes(seed)
        self.chunk = 0  # the index of the chunk in pool
        self.pool = b""  # its bytes made so far
        self.at = 0  # of pool, the bytes taken

    def refill(self):
        if len(self.pool) == CHUNK_BYTES:
            self.chunk += 1
            self.pool, self.at = b"", 0
        # The first draw is mostly random's seed: the first block only, the rest of the chunk
        # when more is drawn (PBKDF2's blocks do not depend on the length asked for).
        n = 32 if self.chunk == 0 and not self.pool else CHUNK_BYTES
        self.pool = _pbkdf2_hmac("sha256", self.seed,
                                 DRBG_LABEL + self.chunk.to_bytes(8, "big"), 1, n)

    def bytes(self, n):
        out = []
        while n > 0:
            if self.at == len(self.pool):
                self.refill()
            take = self.pool[self.at:self.at + n]
            self.at += len(take)
            out.append(take)
            n -= len(take)
        return b"".join(out)


class Order:
    """A replay's order of deliveries: the log, where it is, how many of each event are left,
    and the deliveries held till their turn (event -> [(run, owner)])."""

    def __init__(self, log):
        self.log, self.pos, self.left, self.held = log, 0, {}, {}
        for ev in log:
            self.left[ev] = self.left.get(ev, 0) + 1


class State:
    """One execution's: its generator, its clock log (or the log it replays), its event log
    (or the order it keeps), its verdict."""

    def __init__(self, seed=None, replay=None, exec_id="", events=None, log_open=False):
        self.drbg = Drbg(seed) if seed is not None else None
        self.id = exec_id
        self.log = []
        self.sent = 0  # entries of log sent in replay_log messages
        self.replay = replay  # a list of ints: the reads to return, in order
        self.events = []
        self.events_sent = 0
        self.order = Order(events) if events is not None else None
        self.log_open = log_open
        self.timers = self.calls = 0
        self.overflow = self.events_overflow = False
        self.reason = None if seed is not None else "the execute had no seed"
        self.reason_sent = False
        self.divergence = None
        self.lock = threading.Lock()  # take_log: the main thread's and a batch's

    def mark(self, why):
        if self.reason is None:
            self.reason = why[:REASON_MAX]

    def take_log(self):
        """The entries not sent yet (and the reason, once) as a replay_log message, or None.
        None always for an execute without a seed (an older host, which would not know
        replay_log): not replayable, its logs go in the done only, as before."""
        if self.drbg is None:
            return None
        with self.lock:
            reason = self.reason is not None and not self.reason_sent
            if len(self.log) == self.sent and len(self.events) == self.events_sent and \
                    not reason:
                return None
            m = {"type": "replay_log", "id": self.id}
            if len(self.log) > self.sent:
                m["clock"] = self.log[self.sent:]
                self.sent = len(self.log)
            if len(self.events) > self.events_sent:
                m["events"] = self.events[self.events_sent:]
                self.events_sent = len(self.events)
            if reason:
                m["not_replayable"] = self.reason
                self.reason_sent = True
            return m

    def report(self):
        """The done's members of a replay (docs/protocol.md, "Replay"): the clock reads not
        sent yet (the rest went in replay_log messages), the verdict."""
        with self.lock:
            fields = {"clock_log": self.log[self.sent:], "replayable": self.reason is None}
            self.sent = len(self.log)
        if self.reason is not None:
            fields["not_replayable"] = self.reason
        return fields


# The execution in progress, or None: outside one (the runner's own start, a warm-up, between a
# session's executes) nothing is logged or marked, and the real sources are used.
current = None

_real = {
    "urandom": os.urandom, "time_ns": time.time_ns, "monotonic_ns": time.monotonic_ns,
    "perf_counter_ns": time.perf_counter_ns, "localtime": time.localtime,
    "gmtime": time.gmtime, "ctime": time.ctime, "strftime": time.strftime,
    "open": builtins.open, "os_open": os.open, "thread_start": threading.Thread.start,
    "random_seed": random.Random.seed, "sleep": time.sleep,
}


def random_bytes(n):
    s = current
    if s is None or s.drbg is None:
        return _real["urandom"](n)
    return s.drbg.bytes(n)


# ---- the clock ----------------------------------------------------------------------------

def read(real_us):
    """One read of a clock (@real_us: the real clock in microseconds, called only when the
    execution is not a replay): the value logged or replayed."""
    s = current
    if s is None:
        return real_us()
    if s.replay is not None:
        if len(s.log) >= len(s.replay):
            if s.log_open:
                wait_forever()
            why = (f"clock read {len(s.log) + 1} is past the end of the recorded log "
                   f"({len(s.replay)} reads)")
            s.divergence = s.divergence or why
            raise ReplayDivergence(why)
        v = s.replay[len(s.log)]
        _push(s.log, v, s.sent)
        return v
    v = real_us()
    if len(s.log) < CLOCK_READS_MAX:
        _push(s.log, v, s.sent)
    elif not s.overflow:
        s.overflow = True
        s.mark(f"too many clock reads (more than {CLOCK_READS_MAX})")
    return v


def _push(log, v, sent):
    log.append(v)
    if len(log) - sent >= BATCH_MAX:
        flush()


def wait_forever():
    """The recorded run was killed here (log_open): so is this one, by its own timeout. The
    thread sleeps (nothing more happens), as the original did not go on."""
    while True:
        _real["sleep"](3600)


# ---- the order of deliveries ------------------------------------------------------------------

# Where replay_log messages go (a function of the message; the runner's channel).
sink = None


def take_log():
    """What is new of the running execution's logs, as a replay_log message, or None."""
    s = current
    return s.take_log() if s is not None else None


def flush():
    """Send what is new of the logs now (before an output, the done; a batch full)."""
    if sink is None:
        return
    m = take_log()
    if m is not None:
        sink(m)


def call_event():
    """The event of the result of a call made now: (the execution, 2 * k + 1 for its k-th
    call), or None outside an execution."""
    s = current
    if s is None:
        return None
    s.calls += 1
    return s, 2 * s.calls + 1


def _log_event(s, ev):
    if len(s.events) < EVENT_LOG_MAX:
        _push(s.events, ev, s.events_sent)
    elif not s.events_overflow:
        s.events_overflow = True
        s.mark(f"too many events (more than {EVENT_LOG_MAX})")


def deliver(tag, run, owner=None):
    """The delivery @tag ((s, ev): the event ev of the execution s) happens now, on the event
    loop: @run() does it. Logged in a record; in a replay done at its turn, or held till then,
    or never (the log has it no more: the original ended before it came). @owner: a timer's
    handle (a cancelled one's held firing is dropped)."""
    if tag is None or tag[0] is not current:
        return run()  # outside the execution that made it (a session's earlier one): as it comes
    s, ev = tag
    r = s.order
    if r is None:
        _log_event(s, ev)
        return run()
    if r.pos < len(r.log) and r.log[r.pos] == ev:
        _take(s, r, ev)
        return run()
    held = r.held.setdefault(ev, [])
    if r.left.get(ev, 0) > len(held):
        held.append((run, owner))
    elif not held:
        del r.held[ev]
    return None


# Loop turns a held delivery waits, once its turn came, for the program to do what the one
# before it set off (the callbacks it made ready). In the recorded run the next one came later,
# while the loop waited; a program that keeps callbacks ready for ever gets it after these.
RELEASE_TURNS_MAX = 1000


def _take(s, r, ev):
    s.events.append(ev)
    r.pos += 1
    r.left[ev] -= 1
    if r.pos < len(r.log) and r.log[r.pos] in r.held:
        import asyncio
        asyncio.get_running_loop().call_soon(_release_when_idle, s, 0)


def _release_when_idle(s, turns):
    """The next held delivery, once the loop has nothing else ready (asyncio's _ready queue):
    what this delivery set off (a task woken, and the tasks it wakes) runs first, as it did when
    the next one came later (asyncio.wait(FIRST_COMPLETED) sees one done, not two)."""
    import asyncio
    loop = asyncio.get_running_loop()
    if loop._ready and turns < RELEASE_TURNS_MAX:
        loop.call_soon(_release_when_idle, s, turns + 1)
        return
    _release(s)


def _release(s):
    r = s.order
    if current is not s or r.pos >= len(r.log):
        return
    ev = r.log[r.pos]
    held = r.held.get(ev)
    if not held:
        return
    run, owner = held.pop(0)
    if not held:
        del r.held[ev]
    if owner is not None and owner.cancelled():
        _release(s)
        return
    _take(s, r, ev)
    run()


_real_call_at = None
_real_as_completed = None


def _as_completed(fs, *, timeout=None):
    """asyncio.as_completed starts the coroutines it is given in the order of a set, by memory
    address, which differs from run to run: started here in the order given (their tool calls
    go out in it), then waited for as before."""
    import asyncio
    if asyncio.isfuture(fs) or asyncio.iscoroutine(fs):
        return _real_as_completed(fs, timeout=timeout)  # its own TypeError
    tasks = [asyncio.ensure_future(f) for f in dict.fromkeys(fs)]
    return _real_as_completed(tasks, timeout=timeout)


def _call_at(self, when, callback, *args, context=None):
    """asyncio's loop.call_at (call_later's too): the firing is an event (deliver)."""
    s = current
    if s is None:
        return _real_call_at(self, when, callback, *args, context=context)
    s.timers += 1
    tag = (s, 2 * s.timers)
    box = []

    def fire(*a):
        ctx = contextvars.copy_context()
        deliver(tag, lambda: ctx.run(callback, *a), box[0] if box else None)
    handle = _real_call_at(self, when, fire, *args, context=context)
    box.append(handle)
    return handle


class _Shown(io.TextIOWrapper):
    """sys.stdout and sys.stderr: what the program read goes out before what it shows."""

    def write(self, text):
        if current is not None:
            flush()
        return super().write(text)


def _shown(stream):
    return _Shown(stream.buffer, encoding=stream.encoding, errors=stream.errors,
                  line_buffering=stream.line_buffering, write_through=True)


def _wall_us():
    return _real["time_ns"]() // 1000


def _mono_us():
    return _real["monotonic_ns"]() // 1000


def _perf_us():
    return _real["perf_counter_ns"]() // 1000


def _time():
    return read(_wall_us) / 1e6


def _time_ns():
    return read(_wall_us) * 1000


def _monotonic():
    return read(_mono_us) / 1e6


def _monotonic_ns():
    return read(_mono_us) * 1000


def _perf_counter():
    return read(_perf_us) / 1e6


def _perf_counter_ns():
    return read(_perf_us) * 1000


def _with_now(name):
    real = _real[name]

    def f(*args):
        if not args or args[0] is None:
            return real(_time(), *args[1:])
        return real(*args)
    f.__name__ = name
    return f


def _strftime(fmt, t=None):
    return _real["strftime"](fmt, t if t is not None else time.localtime())


RealDatetime = datetime.datetime
RealDate = datetime.date


def _wall_datetime(tz=None):
    us = read(_wall_us)
    return RealDatetime.fromtimestamp(us // 1000000, tz).replace(microsecond=us % 1000000)


class _DateMeta(type):
    # Instances of the real classes (made by C code, by pickles) are still instances of these.
    def __instancecheck__(cls, obj):
        return isinstance(obj, cls.__bases__[0])


class FakeDate(RealDate, metaclass=_DateMeta):
    @classmethod
    def today(cls):
        d = _wall_datetime()
        return RealDate(d.year, d.month, d.day)


class FakeDatetime(RealDatetime, metaclass=_DateMeta):
    @classmethod
    def now(cls, tz=None):
        return _wall_datetime(tz)

    @classmethod
    def today(cls):
        return _wall_datetime()

    @classmethod
    def utcnow(cls):
        return _wall_datetime(datetime.timezone.utc).replace(tzinfo=None)


# ---- what cannot be replayed ----------------------------------------------------------------

_RANDOM_DEVICES = ("/dev/urandom", "/dev/random")


def _check_path(file):
    s = current
    if s is None:
        return
    try:
        path = os.fsdecode(os.fspath(file))
    except TypeError:
        return  # a file descriptor
    if "random" in path and os.path.realpath(path) in _RANDOM_DEVICES:
        s.mark(f"the program opened {os.path.realpath(path)} (its bytes are not recorded)")


def _open(file, *args, **kwargs):
    _check_path(file)
    return _real["open"](file, *args, **kwargs)


def _os_open(path, *args, **kwargs):
    _check_path(path)
    return _real["os_open"](path, *args, **kwargs)


def _thread_start(self):
    if current is not None:
        current.mark(f"a thread was started (threading.Thread.start: {self.name})")
    return _real["thread_start"](self)


def _at_fork():
    if current is not None:
        current.mark("a process was forked (os.fork, multiprocessing)")


def _wrap_process(module, name, what):
    real = getattr(module, name, None)
    if real is None:
        return

    def f(*args, **kwargs):
        if current is not None:
            current.mark(f"a process was started ({what})")
        return real(*args, **kwargs)
    f.__name__ = name
    setattr(module, name, f)


def _random_seed(self, a=None, version=2):
    # random.Random() and seed() without an argument: from the execution's generator.
    if a is None and current is not None and current.drbg is not None:
        a = int.from_bytes(current.drbg.bytes(SEED_BYTES), "big")
    return _real["random_seed"](self, a, version)


def install():
    """Route every source above through this module, once, at the runner's start (before any
    execution: outside one they behave as before)."""
    os.urandom = random_bytes
    random._urandom = random_bytes  # SystemRandom, hence secrets and numpy's SeedSequence
    random.Random.seed = _random_seed
    random.seed = random._inst.seed  # the module's functions are bound methods of _inst
    time.time, time.time_ns = _time, _time_ns
    time.monotonic, time.monotonic_ns = _monotonic, _monotonic_ns
    time.perf_counter, time.perf_counter_ns = _perf_counter, _perf_counter_ns
    for name in ("localtime", "gmtime", "ctime"):
        setattr(time, name, _with_now(name))
    time.strftime = _strftime
    builtins.__import__ = _import
    builtins.open = io.open = _open
    os.open = _os_open
    threading.Thread.start = _thread_start
    os.register_at_fork(before=_at_fork)
    import subprocess
    subprocess.Popen._execute_child = _child(subprocess.Popen._execute_child)
    for name in ("system", "posix_spawn", "posix_spawnp"):
        _wrap_process(os, name, f"os.{name}")
    # asyncio's loop times its timers with time.monotonic: the real one, never logged.
    import asyncio.base_events
    global _real_call_at
    asyncio.base_events.BaseEventLoop.time = lambda self: _real["monotonic_ns"]() / 1e9
    _real_call_at = asyncio.base_events.BaseEventLoop.call_at
    asyncio.base_events.BaseEventLoop.call_at = _call_at
    global _real_as_completed
    _real_as_completed = asyncio.as_completed
    asyncio.as_completed = asyncio.tasks.as_completed = _as_completed
    if sys.stdout is not None and hasattr(sys.stdout, "buffer"):
        sys.stdout = _shown(sys.stdout)
    if sys.stderr is not None and hasattr(sys.stderr, "buffer"):
        sys.stderr = _shown(sys.stderr)


class _DatetimeView(types.ModuleType):
    """The datetime module as the program's code sees it: the real one, but for datetime and
    date (see the module's comment)."""

    def __getattr__(self, name):
        return getattr(datetime, name)


_datetime_view = _DatetimeView("datetime")
_datetime_view.datetime, _datetime_view.date = FakeDatetime, FakeDate
_real_import = builtins.__import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _real_import(name, globals, locals, fromlist, level)
    if name == "datetime" and level == 0 and globals is not None and \
            globals.get("__name__") == "__main__":
        return _datetime_view
    return module


def _child(real):
    def _execute_child(self, *args, **kwargs):
        if current is not None:
            current.mark("a process was started (subprocess)")
        return real(self, *args, **kwargs)
    return _execute_child


def _log_of(v):
    if v is None:
        return None
    if isinstance(v, list) and all(type(e) is int and e >= 0 for e in v):
        return v
    return []  # the agent checked it: a runner handed anything else diverges at once


def begin(execute):
    """The execution of @execute starts: its generator from its seed, its clock log (or the
    one it replays), its event log (or the order it keeps); random's and numpy's global
    generators seeded from it."""
    global current
    seed = _seed_of(execute.get("seed"))
    current = State(seed, _log_of(execute.get("clock_log")), execute.get("id") or "",
                    _log_of(execute.get("event_log")), execute.get("log_open") is True)
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # The whole Mersenne Twister state (624 words, as seed() with no argument draws): a
        # set_state is ~10 times cheaper under TCG than seed()'s SeedSequence.
        key = numpy.frombuffer(random_bytes(624 * 4), dtype=numpy.uint32)
        numpy.random.set_state(("MT19937", key, 624))
    return current


def end():
    """The execution is over: its state (for the done: report(), and take_log() for what else
    is new of its logs), and the real sources back."""
    global current
    s, current = current, None
    r = s.order if s is not None else None
    if r is not None and r.pos < len(r.log) and not s.log_open and s.divergence is None:
        s.divergence = (f"the replay ended after {r.pos} of the {len(r.log)} recorded "
                        "deliveries (timers, tool results)")
    return s


def _seed_of(text):
    import base64
    import binascii
    if not isinstance(text, str):
        return None
    try:
        seed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return seed if len(seed) == SEED_BYTES else None
