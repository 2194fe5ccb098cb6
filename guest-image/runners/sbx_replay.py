"""What makes a Python execution differ from a run of the same code, made recordable (issue 16;
guest-image/runners/README.md, "Randomness and the clock"; docs/protocol.md, "Replay").

- Randomness: every source a program draws from comes from one generator per execution, seeded
  by the host's `execute.seed`: SHA-256 in counter mode (block i = SHA-256(seed || i as 8 bytes,
  big-endian), the stream their concatenation; the output step of NIST SP 800-90A's Hash_DRBG).
  Without the 32-byte seed its output cannot be predicted; with it, it is the same stream. The
  cryptographic sources (os.urandom, random.SystemRandom and so secrets, uuid.uuid4, numpy's
  default_rng() and SeedSequence()) read the stream itself; the others (the random module's
  functions, random.Random() without a seed, numpy's legacy global generator) are Mersenne
  Twisters seeded from it, as Python and numpy seed them from the kernel otherwise.
- The clock: every read of the time (time.time & co., datetime.now/utcnow/today, date.today)
  goes through one function that logs the value it returns, in microseconds, or, in a replay,
  returns the logged values in order. The runner's own timing (asyncio's loop.time: timers keep
  their real timing) reads the real clock. datetime's classes are C types that cannot be
  patched, nor replaced in the datetime module (C extensions such as pandas subclass them at
  import and refuse a Python base): the program's own code gets a view of the module whose
  `datetime` and `date` are subclasses that read the clock here (an import by __main__ only);
  libraries see the real module, and their datetime.now() is not logged.
- What cannot be made deterministic, detected where cheap: a thread or a process started, a
  read of /dev/urandom or /dev/random through open(). The first reason is kept; the done says
  replayable: false with it.
"""
import builtins
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
# SBX_REASON_MAX: the reason is cut at this many bytes by the receiver; keep it shorter.
REASON_MAX = 1000
# Bytes made per refill of the pool: 32 SHA-256 blocks, cheap to make and enough for the usual
# draws (a uuid4 is 16, numpy's state 2496).
POOL_BYTES = 1024


class ReplayDivergence(Exception):
    """A replay read the clock more often than the recorded execution did."""


class Drbg:
    """SHA-256 in counter mode keyed by the seed (see the module's comment)."""

    def __init__(self, seed):
        self.seed = bytes(seed)
        self.counter = 0
        self.pool = b""

    def bytes(self, n):
        out = []
        while n > 0:
            if not self.pool:
                blocks = []
                for _ in range(POOL_BYTES // 32):
                    blocks.append(hashlib.sha256(
                        self.seed + self.counter.to_bytes(8, "big")).digest())
                    self.counter += 1
                self.pool = b"".join(blocks)
            take, self.pool = self.pool[:n], self.pool[n:]
            out.append(take)
            n -= len(take)
        return b"".join(out)


class State:
    """One execution's: its generator, its clock log (or the log it replays), its verdict."""

    def __init__(self, seed=None, replay=None):
        self.drbg = Drbg(seed) if seed is not None else None
        self.log = []
        self.replay = replay  # a list of ints: the reads to return, in order
        self.overflow = False
        self.reason = None if seed is not None else "the execute had no seed"
        self.divergence = None

    def mark(self, why):
        if self.reason is None:
            self.reason = why[:REASON_MAX]

    def report(self):
        """The done's members of a replay (docs/protocol.md, "Replay")."""
        fields = {"clock_log": self.log, "replayable": self.reason is None}
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
    "random_seed": random.Random.seed,
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
            why = (f"clock read {len(s.log) + 1} is past the end of the recorded log "
                   f"({len(s.replay)} reads)")
            s.divergence = s.divergence or why
            raise ReplayDivergence(why)
        v = s.replay[len(s.log)]
        s.log.append(v)
        return v
    v = real_us()
    if len(s.log) < CLOCK_READS_MAX:
        s.log.append(v)
    elif not s.overflow:
        s.overflow = True
        s.mark(f"too many clock reads (more than {CLOCK_READS_MAX})")
    return v


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
    asyncio.base_events.BaseEventLoop.time = lambda self: _real["monotonic_ns"]() / 1e9


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


def begin(execute):
    """The execution of @execute starts: its generator from its seed, its clock log (or the
    one it replays); random's and numpy's global generators seeded from it."""
    global current
    seed = _seed_of(execute.get("seed"))
    replay = execute.get("clock_log")
    if replay is not None and not (isinstance(replay, list) and
                                   all(type(v) is int and v >= 0 for v in replay)):
        replay = []  # the agent checked it: a runner handed anything else diverges at once
    current = State(seed, replay)
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # The whole Mersenne Twister state (624 words, as seed() with no argument draws): a
        # set_state is ~10 times cheaper under TCG than seed()'s SeedSequence.
        key = numpy.frombuffer(random_bytes(624 * 4), dtype=numpy.uint32)
        numpy.random.set_state(("MT19937", key, 624))
    return current


def end():
    """The execution is over: its state (for the done), and the real sources back."""
    global current
    s, current = current, None
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
