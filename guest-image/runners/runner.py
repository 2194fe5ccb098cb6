"""The Python runner: runs one execution's code, started by the guest agent with the runner
channel on fd 3 (docs/protocol.md, "Runner channel").

It reads `execute`, runs the code like a notebook cell (top-level await allowed; the value of
the last expression statement is the result) or, with an entry, calls that function with the
args and kwargs; tool calls go through the channel; it ends with one `done` {status: ok|error,
result?, error?} and exits. sys.exit(n) exits with n and no done: the agent reports the exit
status. In a session (execute.keep) it stays after its done instead, and runs the next execute
the agent hands it with the same globals (and event loop).

The agent may start it long before its execute (pre-started, and saved in a VM snapshot): it
first runs a warm-up cell through the same code path, then answers the agent's `ping` with
`pong` (it is warm) and waits. At the execute its randomness is seeded by the execute's seed
and its clock reads are logged (or replayed): sbx_replay.py.
"""
import ast
import asyncio
import gc
import inspect
import linecache
import json
import os
import random
import sys
import threading
import time
import traceback

from sbx_channel import Channel, ChannelClosed, encode
import sbx_replay
from sbx_json import HoldsBigInts, SerializationError, check, convert, loads
from sbx_tools import PolicyDenied, SandboxToolError, ToolError, ValidationError, make_tools

FILENAME = "main.py"
# SBX_ERROR_TEXT_MAX: longer error messages and stacks are cut.
ERROR_TEXT_MAX = 16 * 1024


def compile_cell(source):
    """Code objects for the cell without its last expression statement, and for that
    expression (None if the cell does not end with one)."""
    try:
        tree = ast.parse(source, FILENAME, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        body = compile(tree, FILENAME, "exec", flags=flags)
        tail = compile(last, FILENAME, "eval", flags=flags) if last else None
    except SyntaxError as e:
        # Only the offending line matters, not the frames of the compiler.
        raise e.with_traceback(None)
    return body, tail


class EntryError(Exception):
    """The entry cannot be called as asked: a validation_error whose type says why
    (EntryNotFound, TypeError)."""

    def __init__(self, type_, message):
        super().__init__(message)
        self.type = type_


class State:
    """What the cells of one runner share: a session's executes (execute.keep) all of it."""

    def __init__(self):
        self.namespace = None  # the globals, made by the first cell
        self.loop = None  # created on the first top-level await


class Runner:
    def __init__(self, channel, execute, state=None):
        self.channel = channel
        self.exec_id = execute["id"]
        self.execute = execute
        self.state = state or State()
        self.finished = False  # its done is out: its tools refuse (a session's runner goes on)

    def wait(self, awaitable):
        """Run @awaitable to completion on the runner's event loop (one loop for the whole
        cell, so that tasks created by one statement can be awaited by a later one; in a
        session, by a later cell)."""
        if self.state.loop is None:
            self.state.loop = asyncio.new_event_loop()
        return self.state.loop.run_until_complete(awaitable)

    def evaluate(self, code, namespace):
        value = eval(code, namespace)
        if code.co_flags & inspect.CO_COROUTINE:
            value = self.wait(value)
        return value

    def globals(self):
        namespace = self.state.namespace
        if namespace is None:
            namespace = self.state.namespace = {
                "__name__": "__main__", "__file__": os.path.join(os.getcwd(), FILENAME),
                "__builtins__": __builtins__,
                "SandboxToolError": SandboxToolError, "ToolError": ToolError,
                "ValidationError": ValidationError, "PolicyDenied": PolicyDenied,
            }
        # Each execute's namespace replaces the last: functions of earlier cells see it too.
        namespace["tools"] = make_tools(self, self.execute.get("tools"))
        return namespace

    def run(self):
        x = self.execute
        source = x["code"]
        # Tracebacks show the lines of the code, like those of a file.
        linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
        body, tail = compile_cell(source)
        namespace = self.globals()
        value = self.evaluate(body, namespace)
        if tail is not None:
            value = self.evaluate(tail, namespace)
        if not x.get("entry"):
            return value
        return self.call(namespace.get(x["entry"]))

    def call(self, fn):
        x = self.execute
        name = x["entry"]
        if fn is None:
            raise EntryError("EntryNotFound", f"entry {name!r}: no function of that name is "
                             "defined")
        if not callable(fn):
            raise EntryError("EntryNotFound", f"entry {name!r} is not callable (it is "
                             f"{type(fn).__name__})")
        args, kwargs = x.get("args") or [], x.get("kwargs") or {}
        if isinstance(x, HoldsBigInts):
            # An integer of more digits than Python converts (sbx_json.loads): converted now,
            # after the code, which may have raised the limit (sys.set_int_max_str_digits).
            args, kwargs = convert(args, "args"), convert(kwargs, "kwargs")
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise EntryError("TypeError", f"{name}: {e}") from None
        except ValueError:
            pass  # no signature to check against (some builtins): the call itself will say
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = self.wait(value)
        return value


def text(value):
    """Text the protocol accepts: no NUL, valid UTF-8, at most ERROR_TEXT_MAX bytes."""
    data = str(value).replace("\0", "\\0").encode("utf-8", "replace")
    return data[:ERROR_TEXT_MAX].decode("utf-8", "ignore")


RUNNER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_traceback(e):
    """The traceback without the runner's frames (they say nothing about the user's code):
    those above the code, and those of the tool stubs below it. A SyntaxError has no frame
    and shows the offending line."""
    te = traceback.TracebackException.from_exception(e)
    todo, seen = [te], set()
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list(
            [f for f in t.stack if not f.filename.startswith(RUNNER_DIR)])
        todo += [t.__cause__, t.__context__]
    return "".join(te.format())


def describe(e):
    if isinstance(e, EntryError):
        return {"code": "validation_error", "type": e.type, "message": text(e)}
    code = "serialization_error" if isinstance(e, SerializationError) else "runtime_error"
    error = {"code": code, "type": type(e).__name__[:128]}
    try:
        error["message"] = text(e)
        error["stack"] = text(user_traceback(e))
    except Exception:  # an exception whose __str__ fails still gets reported
        error.setdefault("message", f"{type(e).__name__} (its message cannot be printed)")
    return error


def flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def done(exec_id, status, exit_code, **extra):
    return dict({"type": "done", "id": exec_id, "status": status}, **extra,
                exit_code=exit_code, duration_ms=0, output_truncated=False)


def done_frame(exec_id, status, value=None, error=None, replay=None):
    """The one done message, and the exit code it goes with: 0 after ok, 1 after an error.
    @replay: the execution's sbx_replay.State (its clock log and verdict), or None."""
    extra = replay.report() if replay is not None else {}
    if replay is not None and replay.divergence is not None:
        # Even when the program caught the ReplayDivergence: the replay went elsewhere.
        status, error = "error", None
        extra["error"] = {"code": "replay_divergence", "type": "ReplayDivergence",
                          "message": text(replay.divergence)}
    if status == "ok" and value is not None:
        try:
            check(value, "result")
            frame = encode(done(exec_id, "ok", 0, result=value, **extra))
            if frame is None and extra.get("clock_log"):
                frame = encode(done(exec_id, "ok", 0, result=value, **without_log(extra)))
            if frame is None:
                raise SerializationError("result is too large (a message is at most 4 MiB)")
            return frame, 0
        except SerializationError as e:
            return done_frame(exec_id, "error", error=e, replay=replay)
    if status == "ok":
        return encode(done(exec_id, "ok", 0, **extra)), 0
    if error is not None:
        extra["error"] = describe(error)
    frame = encode(done(exec_id, "error", 1, **extra))
    return frame or encode(done(exec_id, "error", 1, **without_log(extra))), 1


def without_log(extra):
    """A done's replay members when its clock log does not fit in the frame beside the rest."""
    return dict(extra, clock_log=[], replayable=False, not_replayable=(
        "the clock log did not fit in the done message beside the result"))


def exit_code_of(e):
    """sys.exit() semantics: None is 0, an int is itself, anything else is printed and 1."""
    if e.code is None or isinstance(e.code, bool):
        return int(bool(e.code))
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


# Run like user code, so that the modules and paths of a first execution are loaded and
# warm before the agent is told so. It must not write a byte; `random` is reseeded again at
# the execute.
WARMUP_CELL = """import json
async def double(x):
    return {"x": x * 2, "s": f"{x!r}"}
r = await double(21)
json.dumps(r)
r
"""


# The warm-up's seed: its draws are dropped, the execute brings its own.
WARM_SEED = "A" * 43 + "="


def warm_up():
    runner = Runner(None, {"id": "warmup", "code": WARMUP_CELL,
                           "tools": [{"provider": "warm", "name": "up"}]})
    try:
        value = runner.run()
        check(value, "result")
        encode(done("warmup", "ok", 0, result=value))
        describe(ValueError("warm-up"))
        loads(json.dumps(value).encode())
        # The paths of an execute's start and end: reseeding (again at the execute), the
        # channel's reader thread, flushing.
        random.seed()
        sbx_replay.begin({"seed": WARM_SEED})
        sbx_replay.random_bytes(16)
        time.time()
        sbx_replay.end()
        thread = threading.Thread(target=lambda: None, name="sbx-warm-up")
        thread.start()
        thread.join()
        flush()
    except Exception:  # nothing to report to yet; a real execution will show what is broken
        pass
    finally:
        if runner.state.loop is not None:
            runner.state.loop.close()
        linecache.cache.pop(FILENAME, None)


def preload():
    """At the first ping (only a pre-started runner gets one: the one a snapshot keeps), import
    numpy if the image has it: `import numpy` takes ~2.6 s under TCG, and imported here it is in
    the snapshot, so an execution's import finds it loaded (docs/measurements.md, "Python's data
    stack"). A runner spawned for an execute gets no ping and does not pay for it. numpy seeds
    its global RandomState at import: reseeded at the execute (reseed()).

    Also the machine's processor name, which `platform` finds by running `uname -p` the first
    time it is asked and then caches: pandas asks at import, and a process started during an
    execution makes it not replayable (sbx_replay.py). Asked here, the answer is in the
    snapshot and no execution starts that process (tests/replay: py_pandas_sample.py)."""
    import platform
    platform.uname().processor  # noqa: B018 (cached by platform, for every later caller)
    try:
        import numpy  # noqa: F401
    except ImportError:
        return
    # numpy's ~25000 objects live as long as the process: out of the collector's sight, or a
    # full collection during an execution walks them all (~95 ms under TCG).
    gc.freeze()


def reseed():
    """Seeded when this process started, maybe in the VM that a snapshot was cloned from: reseed
    from the kernel (reseeded by the agent at hello), so that no two sandboxes draw alike. numpy's
    legacy global generator (np.random.rand & co.) too, if it was imported before the snapshot."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # The whole Mersenne Twister state from the kernel (624 words, as seed() with no
        # argument draws): a set_state is ~10 times cheaper under TCG than seed()'s
        # SeedSequence.
        key = numpy.frombuffer(os.urandom(624 * 4), dtype=numpy.uint32)
        numpy.random.set_state(("MT19937", key, 624))


def warm_output():
    """After a restore (the second ping) the real output paths too: print and the streams into
    the pipes of the execution to come, whose first write otherwise pays for translating the
    kernel's and the agent's output paths. The agent reads these bytes and drops them when our
    pong comes (it waits for the pong before it hands us an execute)."""
    print("warm", 1, flush=True)
    print("warm", file=sys.stderr, flush=True)


# A second ping comes when the host's hello asks for a warm-up: a pooled VM restored from a
# snapshot, whose emulator (TCG) lost its translated code. Warm up again, then pong: the agent
# answers the hello only then, so no execute comes meanwhile (one already queued skips it).
REWARM_DELAY = 0


def wait_for_execute(channel):
    """Read the channel until the execute. The first ping asks whether we are warm (we are:
    the channel is read only after the warm-up); a later one asks for a warm-up again."""
    pings = 0
    while True:
        msg = channel.read()
        if msg.get("type") == "execute":
            return msg
        if msg.get("type") != "ping":
            continue
        pings += 1
        if pings == 1:
            preload()
        else:
            if channel.readable(REWARM_DELAY):
                continue
            warm_up()
            reseed()  # numpy's seeding code too, translated again before the execute's reseed
            warm_output()
        channel.send(encode({"type": "pong", "seq": msg.get("seq", 0)}))


def main():
    sbx_replay.install()
    warm_up()
    channel = Channel(3)
    sbx_replay.sink = lambda m: channel.send(encode(m))
    try:
        execute = wait_for_execute(channel)
    except (ChannelClosed, OSError, ValueError):
        os._exit(70)  # the agent is gone: nobody is left to report to
    channel.start_reader()
    state = State()
    while True:
        runner = Runner(channel, execute, state)
        value = error = None
        sbx_replay.begin(execute)
        try:
            value = runner.run()
        except SystemExit as e:
            flush()
            os._exit(exit_code_of(e))
        except BaseException as e:  # noqa: B902 - every failure of user code is reported
            error = e
        replay = sbx_replay.end()
        frame, code = done_frame(runner.exec_id, "ok" if error is None else "error", value,
                                 error, replay)
        runner.finished = True
        flush()
        # The events and the reason not sent yet; the clock's tail is in the done.
        tail = replay.take_log() if replay is not None else None
        if tail is not None:
            channel.send(encode(tail))
        channel.send(frame)
        if execute.get("keep") is not True:
            os._exit(code)
        # A session's: stay, with the globals, for the next execute (the agent keeps us).
        del value, error, frame
        channel.abandon_calls()
        try:
            execute = channel.next_execute()
        except ChannelClosed:
            os._exit(70)


if __name__ == "__main__":
    main()
