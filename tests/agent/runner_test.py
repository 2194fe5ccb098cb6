#!/usr/bin/env python3
"""The language runners on their own, without the agent: how values cross their side of the
boundary. The host forwards each number literal as it is, so what a runner writes is what the
other side reads: these tests look at the runner's bytes on the channel, not at a re-parsed
copy (Python's json here would turn -0 into 0, and refuse to print 10**5000).

Usage: runner_test.py RUNNERS_DIR TEST_NAME   (or "all")

js_json and python_json test the serialisers directly (json.mjs via test-json.mjs on node;
sbx_json and sbx_channel imported here). The others start a runner (node runner.mjs, python3
runner.py) with one end of a socket pair as its fd 3 and play the agent: an execute (no ping:
as for a runner spawned for an execute), tool results written as raw JSON text, the done.
SBX_TEST_NODE and SBX_TEST_PYTHON choose the runtimes (default /usr/bin/node, /usr/bin/python3).
"""
import base64
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import programs  # noqa: E402

NODE = os.environ.get("SBX_TEST_NODE", "/usr/bin/node")
PYTHON = os.environ.get("SBX_TEST_PYTHON", "/usr/bin/python3")
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 30  # seconds any single expected message may take (runtimes start slowly under load)


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}" if detail else what)


# A JSON reader for the test's side that keeps every number as its text (Python's own would
# lose -0 and refuse more than 4300 digits): {"a": -0} reads as {"a": Num("-0")}.
class Num(str):
    pass


def read_raw(text):
    return json.loads(text, parse_int=Num, parse_float=Num, parse_constant=Num)


def frame(text):
    body = text.encode()
    return struct.pack(">I", len(body)) + body


# ---- a runner on a socket pair ---------------------------------------------------------------

class Runner:
    """One runner process, its fd 3 our socket's peer."""

    def __init__(self, runners, language):
        self.dir = tempfile.mkdtemp(prefix="sbx-runner-test-")
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        argv = ([NODE, os.path.join(runners, "runner.mjs")] if language == "javascript"
                else [PYTHON, os.path.join(runners, "runner.py")])
        fd = theirs.fileno()
        self.log_path = os.path.join(self.dir, "log")
        with open(self.log_path, "wb") as log:
            # fd 3 in the runner, as the agent gives it (dup2 makes it inheritable).
            self.proc = subprocess.Popen(argv, cwd=self.dir, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, close_fds=False,
                                         preexec_fn=lambda: os.dup2(fd, 3))
        theirs.close()
        self.next_id = 1

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            check(chunk, "the runner closed its channel", self.log())
            data += chunk
        return data

    def recv(self):
        """The next message's text."""
        (n,) = struct.unpack(">I", self._exact(4))
        return self._exact(n).decode()

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-3000:]

    def run(self, execute, answers=None):
        """Send @execute (a dict, or JSON text) and play the agent until the done: @answers maps a
        tool name to the raw JSON text of its result (a string), or to a function of the call
        (read_raw) returning the text of the whole tool_result's answer fields. Returns the
        done's text and the calls' texts."""
        if isinstance(execute, dict):
            execute = json.dumps(dict({"type": "execute", "id": "x1", "tools": []}, **execute))
        self.sock.sendall(frame(execute))
        calls = []
        self.logs = []  # the replay_log messages, read
        self.order = []  # the types of the messages, in order
        while True:
            text = self.recv()
            msg = read_raw(text)
            self.order.append(msg["type"])
            if msg["type"] == "done":
                return text, calls
            if msg["type"] == "replay_log":
                self.logs.append(json.loads(text))
                continue
            check(msg["type"] == "tool_call", "a tool_call, a replay_log or the done",
                  text[:2000])
            calls.append(text)
            answer = (answers or {}).get(msg["tool"])
            check(answer is not None, f"an answer for {msg['tool']}", text[:2000])
            fields = answer(msg) if callable(answer) else f'"ok":true,"result":{answer}'
            try:
                self.sock.sendall(frame(f'{{"type":"tool_result","id":"x1",'
                                        f'"call_id":{msg["call_id"]},{fields}}}'))
            except (BrokenPipeError, ConnectionResetError):
                pass  # a late answer: the runner finished and exited (its done is there)

    def close(self):
        """Close the channel (the JS runner waits for that after its done) and reap."""
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure("the runner did not exit once its channel was closed")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Session(Runner):
    """A runner that takes several executes (execute.keep): each cell's done, read raw."""

    def __init__(self, runners, language):
        super().__init__(runners, language)
        self.language = language

    def cell(self, code, answers=None, **fields):
        execute = dict({"type": "execute", "id": f"x{self.next_id}", "tools": [], "keep": True,
                        "language": self.language, "code": code}, **fields)
        self.next_id += 1
        try:
            done, self.calls = self.run(json.dumps(execute), answers)
        except (Failure, OSError) as e:
            raise Failure(f"{e}\n--- runner output ---\n{self.log()}")
        return done, read_raw(done)

    def value(self, code, answers=None, **fields):
        """The cell's result, which must be ok."""
        done, msg = self.cell(code, answers, **fields)
        check(msg["status"] == "ok", f"status ok for {code[:200]!r}", done[:3000])
        return json.loads(done).get("result")


def session(runners, language, body):
    s = Session(runners, language)
    try:
        body(s)
    finally:
        s.close()


def run(runners, language, execute, answers=None, logs=None):
    """One execution in a runner of its own: (done text, the done read raw, the call texts).
    @logs: a list that gets the replay_log messages sent before the done."""
    r = Runner(runners, language)
    try:
        execute = dict(execute, language=language) if isinstance(execute, dict) else execute
        done, calls = r.run(execute, answers)
        if logs is not None:
            logs.extend(r.logs)
    except (Failure, OSError) as e:
        raise Failure(f"{e}\n--- runner output ---\n{r.log()}")
    finally:
        r.close()
    return done, read_raw(done), calls


def whole_logs(done, logs):
    """The done as a dict, its clock_log the whole log (the replay_logs' reads, then the
    done's), and event_log the replay_logs' events, as the host puts them together."""
    d = json.loads(done)
    d["clock_log"] = [v for m in logs for v in m.get("clock", [])] + d.get("clock_log", [])
    d["event_log"] = [v for m in logs for v in m.get("events", [])]
    return d


def result_text(done):
    """The text of the done's result member: the done is {...,"result":<text>,...}."""
    start = done.index('"result":') + len('"result":')
    value = json.JSONDecoder(parse_int=Num, parse_float=Num).raw_decode(done, start)
    return done[start:value[1]]


def expect_ok(done, msg, result_text_=None):
    check(msg["status"] == "ok", "status ok", done[:3000])
    if result_text_ is not None:
        got = result_text(done)
        check(got == result_text_, f"result text {result_text_[:300]}", got[:3000])


def expect_error(done, msg, code, message=None, type_=None):
    check(msg["status"] == "error", "status error", done[:3000])
    err = msg["error"]
    check(err["code"] == code, f"error code {code}", done[:3000])
    if type_ is not None:
        check(err["type"] == type_, f"error type {type_}", done[:3000])
    if message is not None:
        check(err["message"] == message, f"message {message!r}", done[:3000])


def tools(*names):
    return [{"provider": "calc", "name": n} for n in names]


BIG = "1" + "0" * 4999  # 5000 digits: more than Python's default limit (4300)
LIMIT_HINT = ("Python converts integers of at most 4300 digits to and from text "
              "(sys.get_int_max_str_digits()); raise the limit with "
              "sys.set_int_max_str_digits(n), or 0 for none")


# ---- the tests -------------------------------------------------------------------------------

def test_js_json(runners):
    """json.mjs: toJson's numbers (-0, BigInt, shortest doubles) and refusals."""
    p = subprocess.run([NODE, os.path.join(HERE, "test-json.mjs"), runners],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and p.stdout == "ok\n", "test-json.mjs passes",
          p.stdout[-2000:] + p.stderr[-4000:])


def test_python_json(runners):
    """sbx_json: check() takes ints of any size up to Python's own limit, refuses beyond it at
    the value's path; floats round-trip; loads() leaves a too-long int to convert()."""
    sys.path.insert(0, runners)
    sys.dont_write_bytecode = True  # nothing of ours in the runners' directory
    import sbx_channel
    import sbx_json
    from sbx_json import SerializationError, check as sbx_check

    def refused(value, path="result"):
        try:
            sbx_check(value, path)
        except SerializationError as e:
            return str(e)
        return None

    default = sys.get_int_max_str_digits()
    check(default == 4300, f"Python's default limit is 4300 (here {default})")
    for v in (0, 1, -1, 2**63, 2**70, -(2**70), 2**1024, 10**4000, -(10**4000), 10**4300 - 1,
              -(10**4300 - 1), [2**70, {"a": 10**4000}]):
        check(refused(v) is None, f"check() accepts {str(v)[:30]}...", refused(v))
    check(refused({"a": [1, 10**5000]}) ==
          f"result['a'][1] is an integer of more than 4300 digits: {LIMIT_HINT}",
          "10**5000 refused at its path, naming the limit", refused({"a": [1, 10**5000]}))
    check(refused(10**4300) and refused(-(10**4300)), "4301 digits refused")
    # The bit-length shortcut agrees with Python's own conversion near the threshold, for
    # several limits (0: none).
    try:
        for limit in (640, 1000, 4300):
            sys.set_int_max_str_digits(limit)
            for bits in range(int(3.31 * limit), int(3.34 * limit) + 3):
                for v in (2**bits - 1, 2**bits, 2**bits + 1, -(2**bits), 10**limit - 1,
                          10**limit):
                    try:
                        str(v)
                        printable = True
                    except ValueError:
                        printable = False
                    check((refused(v) is None) == printable,
                          f"limit {limit}: check() of 2**{bits}-ish agrees with str()",
                          refused(v))
        sys.set_int_max_str_digits(0)
        check(refused(10**20000) is None, "no limit: 10**20000 accepted")
        sys.set_int_max_str_digits(640)
        check(refused(10**640) == f"result is an integer of more than 640 digits: "
              f"{LIMIT_HINT.replace('4300', '640')}", "the message names the limit in force")
    finally:
        sys.set_int_max_str_digits(default)

    # Floats: the shortest round trip, -0.0 keeps its sign, inf and nan still refused.
    for x in (-0.0, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, 1e16, 2.0**-1074 * 3):
        check(refused(x) is None, f"{x!r} accepted")
        back = json.loads(json.dumps(x))
        check(back == x and repr(back) == repr(x), f"{x!r} reads back as itself", repr(back))
    check(json.dumps(-0.0) == "-0.0", "-0.0 printed with its sign")
    body = sbx_channel.encode({"result": [-0.0, 2**70, 10**4000]})[4:].decode()
    check(body == f'{{"result":[-0.0,1180591620717411303424,1{"0" * 4000}]}}',
          "a frame carries -0.0 and big ints exactly", body[:200])
    for x, what in ((float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "nan")):
        check(refused([x]) == "result[0] is " + what + ": only JSON values (dict with str "
              "keys, list, tuple, str, int, finite float, bool, None) can cross the sandbox "
              "boundary", f"{what} refused", refused([x]))

    # loads(): the fast path as json.loads; an int beyond the limit is left to convert().
    msg = sbx_json.loads(b'{"a":-0.0,"b":1e400,"c":12345678901234567890123}')
    check(type(msg) is dict and repr(msg["a"]) == "-0.0" and msg["b"] == float("inf")
          and msg["c"] == 12345678901234567890123, "loads() as json.loads", repr(msg))
    text = f'{{"ok":true,"result":{{"n":[-{BIG}],"m":7}}}}'.encode()
    msg = sbx_json.loads(text)
    check(isinstance(msg, sbx_json.HoldsBigInts) and msg["result"]["m"] == 7,
          "a too-long int leaves the message readable", repr(msg)[:300])
    try:
        sbx_json.convert(msg["result"], "result")
        raise Failure("convert() refuses an int beyond the limit")
    except ValueError as e:
        check(str(e) == f"result['n'][0] is an integer of 5000 digits: {LIMIT_HINT}",
              "the message names the path, the digits, the limit", str(e))
    try:
        sys.set_int_max_str_digits(0)
        check(sbx_json.convert(msg["result"], "result") == {"n": [-int(BIG)], "m": 7},
              "convert() with the limit raised")
    finally:
        sys.set_int_max_str_digits(default)
    try:
        sbx_json.loads(b'{"a":')
        raise Failure("loads() refuses bad JSON")
    except json.JSONDecodeError:
        pass


def test_js_numbers(runners):
    """The JS runner: -0 and BigInt in a tool input and in the result, exactly; a tool result's
    and the args' numbers are what JSON.parse makes of them."""
    code = ("const r = await tools.calc.echo({z: -0, big: 1234567890123456789n,"
            " d: 0.1 + 0.2, t: 5e-324});\n"
            "[Object.is(r.z, -0), r.big === 9007199254740992, r.inf === Infinity,"
            " r.d === 0.1 + 0.2, r.t, -0, 2n ** 70n, [0.1, -0, 1e21]]")
    done, msg, calls = run(runners, "javascript", {"code": code, "tools": tools("echo")},
                           {"echo": '{"z":-0,"big":9007199254740993,"inf":1e400,'
                                    '"d":0.30000000000000004,"t":5e-324}'})
    expect_ok(done, msg, "[true,true,true,true,5e-324,-0,1180591620717411303424,"
                         "[0.1,-0,1e+21]]")
    check(len(calls) == 1 and '"input":{"z":-0,"big":1234567890123456789,'
          '"d":0.30000000000000004,"t":5e-324}' in calls[0], "the input's exact text", calls)
    # The args: JSON.parse of the execute.
    execute = ('{"type":"execute","id":"x1","language":"javascript","tools":[],'
               '"code":"function main(a, b, c) { return [Object.is(a, -0), b, c]; }",'
               '"entry":"main","args":[-0,9007199254740993,-0.0]}')
    done, msg, _ = run(runners, "javascript", execute)
    expect_ok(done, msg, "[true,9007199254740992,-0]")
    # NaN is still refused, naming what can cross.
    done, msg, _ = run(runners, "javascript", {"code": "({a: [1n, NaN]})"})
    expect_error(done, msg, "serialization_error",
                 "result.a[1] is NaN: only JSON values (objects, arrays, strings, finite "
                 "numbers, bigints, booleans, null) can cross the sandbox boundary")


def test_python_numbers(runners):
    """The Python runner: ints of any size (to Python's limit) and -0.0 in a tool input and in
    the result, exactly; beyond the limit, a serialization error at the value's path."""
    code = ("import math\n"
            "r = tools.calc.echo({'z': -0.0, 'big': 2**70, 'huge': 10**4000, 'd': 0.1 + 0.2})\n"
            "[math.copysign(1, r['z']), r['big'] == 2**70, r['huge'] == 10**4000,"
            " r['d'] == 0.1 + 0.2, r['zi'], r['inf'] == math.inf, -0.0, -(2**70), 10**4000]")
    echo = (f'{{"z":-0.0,"zi":-0,"big":1180591620717411303424,"huge":1{"0" * 4000},'
            f'"d":0.30000000000000004,"inf":1e400}}')
    done, msg, calls = run(runners, "python", {"code": code, "tools": tools("echo")},
                           {"echo": echo})
    expect_ok(done, msg, f'[-1.0,true,true,true,0,true,-0.0,-1180591620717411303424,'
                         f'1{"0" * 4000}]')
    check(len(calls) == 1 and f'"input":{{"z":-0.0,"big":1180591620717411303424,'
          f'"huge":1{"0" * 4000},"d":0.30000000000000004}}' in calls[0],
          "the input's exact text", [c[:300] for c in calls])
    # Beyond the limit: refused at its path, in the result and in a tool input.
    done, msg, _ = run(runners, "python", {"code": "{'a': [1, 10**5000]}"})
    expect_error(done, msg, "serialization_error",
                 f"result['a'][1] is an integer of more than 4300 digits: {LIMIT_HINT}")
    code = ("try:\n    tools.calc.echo({'n': -(10**5000)})\n"
            "except Exception as e:\n    out = [type(e).__name__, str(e)]\n"
            "import sys\nsys.set_int_max_str_digits(0)\nout + [len(str(10**5000))]")
    done, msg, calls = run(runners, "python", {"code": code, "tools": tools("echo")})
    expect_ok(done, msg)
    check(msg["result"] == ["SerializationError", "input['n'] is an integer of more than 4300 "
                            f"digits: {LIMIT_HINT}", Num("5001")] and not calls,
          "a too-long input refused in the code", done[:3000])
    # With the limit raised, the result may hold it.
    done, msg, _ = run(runners, "python",
                       {"code": "import sys\nsys.set_int_max_str_digits(0)\n[10**5000]"})
    expect_ok(done, msg, f"[1{'0' * 5000}]")


def test_python_big_ints(runners):
    """A tool result holding an integer of more digits than Python converts fails that call,
    in the code (ValueError, at the call site), not the runner: later calls work, and with the
    limit raised the same result reads. The same for the args of an entry."""
    code = ("import asyncio, sys, traceback\nout = []\n"
            "try:\n    tools.calc.big()\n"
            "except ValueError as e:\n"
            "    out.append(str(e))\n"
            "    out.append(traceback.extract_tb(e.__traceback__)[0].lineno)\n"
            "out.append(tools.calc.add({'a': 1, 'b': 2}))\n"
            "try:\n    await tools.calc.big.aio()\n"
            "except ValueError as e:\n    out.append(str(e)[:40])\n"
            "sys.set_int_max_str_digits(0)\n"
            "r = tools.calc.big()\n"
            "out.append([len(str(r['n'][0])), r['m']])\nout")
    def add(m):
        return f'"ok":true,"result":{{"sum":{int(m["input"]["a"]) + int(m["input"]["b"])}}}'

    answers = {"big": f'{{"n":[{BIG}],"m":7}}', "add": add}
    done, msg, calls = run(runners, "python", {"code": code, "tools": tools("big", "add")},
                           answers)
    expect_ok(done, msg)
    want = [f"tools.calc.big: result['n'][0] is an integer of 5000 digits: {LIMIT_HINT}",
            Num("4"), {"sum": Num("3")}, "tools.calc.big: result['n'][0] is an int",
            [Num("5000"), Num("7")]]
    check(msg["result"] == want and len(calls) == 4, "the call fails, the runner goes on",
          done[:3000])
    # The args: converted after the code ran, which may raise the limit.
    execute = {"entry": "main", "args": [1, 2]}
    text = json.dumps(dict({"type": "execute", "id": "x1", "tools": [], "language": "python",
                            "code": "import sys\nsys.set_int_max_str_digits(0)\n"
                                    "def main(a, n):\n    return [a, len(str(n))]"},
                           **execute)).replace('"args": [1, 2]', f'"args": [1, {BIG}]')
    done, msg, _ = run(runners, "python", text)
    expect_ok(done, msg, "[1,5000]")
    text = text.replace("sys.set_int_max_str_digits(0)", "pass")
    done, msg, _ = run(runners, "python", text)
    expect_error(done, msg, "runtime_error",
                 f"args[1] is an integer of 5000 digits: {LIMIT_HINT}", "ValueError")


# ---- sessions and function calls --------------------------------------------------------------

def test_js_session(runners):
    """execute.keep: the JS runner stays after its done and runs the next cell with the
    globals of the earlier ones: top-level var/let/const (destructuring too), functions (still
    hoisted), classes and imports; a later cell declares the same names again; line numbers
    are kept; an error does not end the session; an entry may come from an earlier cell."""
    def body(s):
        got = s.value("import path from 'node:path';\n"
                      "import { sep as s, join } from 'node:path';\nimport * as os from 'node:os';\n"
                      "let x = 1, {a, b: [c = 3, ...rest]} = {a: 2, b: [undefined, 4, 5]};\n"
                      "const y = {v: 10};\nvar z;\nlet early = hoisted();\n"
                      "function hoisted() { return 'h'; }\n"
                      "function twice(n) { return n * 2; }\n"
                      "async function later(n) { return n + 1; }\n"
                      "class Box { constructor(v) { this.v = v; } get double() "
                      "{ return twice(this.v); } }\n"
                      "[x, a, c, rest, typeof z, early, y.v]")
        check(got == [1, 2, 3, [4, 5], "undefined", "h", 10], "the first cell", got)
        got = s.value("let x = 'again';\nconst y = x + '!';\n"
                      "[x, y, twice(a), new Box(4).double, path.basename('/q/r.js'), s,"
                      " join('a', 'b'), typeof os.cpus]")
        check(got == ["again", "again!", 4, 8, "r.js", "/", "a/b", "function"],
              "the second cell sees the first's names, declares x and y again", got)
        got = s.value("const q = 1;\nlet w = 2;\nnew Error('here').stack.split('\\n')[1].trim()")
        check(got.startswith("at main.js:3:"), "line numbers kept", got)
        done, msg = s.cell("let u = 1;\nthrow new RangeError('boom');")
        expect_error(done, msg, "runtime_error", "boom", "RangeError")
        check("main.js:2" in msg["error"].get("stack", ""), "the stack names the line", done)
        check(s.value("[x, u]") == ["again", 1], "state survives an error")
        check(s.value("", entry="later", args=[41]) == 42, "an entry of an earlier cell")
        check(s.value("", entry="twice", args=[21]) == 42, "another one")
        # tools: each execute's own; a function of an earlier cell calls the current ones.
        s.value("async function use() { return await tools.calc.echo({a: 1}); }\n"
                "const stale = tools.calc.echo;", tools=tools("echo"))
        check(s.value("", {"echo": '"now"'}, entry="use", tools=tools("echo")) == "now" and
              '"id":"x9"' in s.calls[0], "the current execute's tools", s.calls)
        got = s.value("await stale({}).catch((e) => [e.name, e.message])", tools=tools("echo"))
        check(got == ["ToolError", "calc.echo: the execution that made this call is over"],
              "a tool of an earlier execute refuses", got)
        # a declaration that ends the cell without a semicolon (scripts/bench's `let x = 1`)
        done, msg = s.cell("let last = 7")
        check(msg.get("status") == "ok" and "result" not in msg, "a cell ending in a let", msg)
        check(s.value("last + 1") == 8, "its binding is a global", done)
        done, msg = s.cell("class Last {}")
        check(msg.get("status") == "ok", "a cell ending in a class", msg)
        check(s.value("typeof Last") == "function", "the class is a global")

    session(runners, "javascript", body)


def test_python_session(runners):
    """execute.keep: the Python runner keeps one globals dict (and event loop) across cells:
    variables, imports, functions, classes, a task of an earlier cell; an error does not end
    the session; an entry may come from an earlier cell."""
    def body(s):
        got = s.value("import json\nfrom math import sqrt as root\nx = 1\n"
                      "def twice(n):\n    return n * 2\n"
                      "async def later(n):\n    return n + 1\n"
                      "class Box:\n    def __init__(self, v):\n        self.v = v\n"
                      "import asyncio\nt = asyncio.create_task(asyncio.sleep(0.01, 'late'))\n"
                      "await asyncio.sleep(0)\n[x, root(16)]")
        check(got == [1, 4.0], "the first cell", got)
        got = s.value("x += 1\n[x, twice(3), Box(5).v, json.dumps([1]), root(9), await t]")
        check(got == [2, 6, 5, "[1]", 3.0, "late"], "the second cell sees the first's", got)
        done, msg = s.cell("y = 1\nraise KeyError('k')")
        expect_error(done, msg, "runtime_error", "'k'", "KeyError")
        check(s.value("[x, y]") == [2, 1], "state survives an error")
        check(s.value("", entry="later", args=[41]) == 42, "an async entry of an earlier cell")
        check(s.value("", entry="twice", kwargs={"n": 21}) == 42, "keyword arguments")
        # Arguments it does not take: refused before the call (nothing of it runs).
        s.value("hits = []\ndef count(n):\n    hits.append(n)\n    return len(hits)")
        done, msg = s.cell("", entry="count", args=[1], kwargs={"n": 2})
        expect_error(done, msg, "validation_error", type_="TypeError")
        check(s.value("hits") == [], "the function was not called", done)
        # tools: each execute's own; a function of an earlier cell calls the current ones.
        s.value("def use():\n    return tools.calc.echo({'a': 1})\nstale = tools.calc.echo",
                tools=tools("echo"))
        check(s.value("", {"echo": '"now"'}, entry="use", tools=tools("echo")) == "now" and
              '"id":"x11"' in s.calls[0], "the current execute's tools", s.calls)
        got = s.value("try:\n    stale({})\nexcept ToolError as e:\n    r = str(e)\nr",
                      tools=tools("echo"))
        check(got == "calc.echo: the execution that made this call is over",
              "a tool of an earlier execute refuses", got)

    session(runners, "python", body)


def test_js_calls(runners):
    """entry: positional args, async functions awaited; EntryNotFound (missing, not a
    function); kwargs refused before the code runs; a value that is not JSON; an exception
    with the user's stack."""
    code = ("console.log('ran');\nfunction add(a, b) { return a + b; }\n"
            "async function slow(x) { await new Promise((r) => setTimeout(r, 5)); return [x]; }\n"
            "const notfn = 3;\nfunction fn() { return () => 1; }\n"
            "function boom() {\n  throw new TypeError('bad');\n}")

    def call(entry, **fields):
        return run(runners, "javascript", dict({"code": code, "entry": entry}, **fields))

    done, msg, _ = call("add", args=[2, 3])
    expect_ok(done, msg, "5")
    done, msg, _ = call("slow", args=["v"])
    expect_ok(done, msg, '["v"]')
    done, msg, _ = call("missing")
    expect_error(done, msg, "validation_error", "entry missing: no function of that name is "
                 "defined", "EntryNotFound")
    done, msg, _ = call("notfn")
    expect_error(done, msg, "validation_error", "entry notfn is not a function (it is number)",
                 "EntryNotFound")
    done, msg, _ = call("add", args=[1], kwargs={"b": 2})
    expect_error(done, msg, "validation_error", "kwargs: JavaScript functions take positional "
                 "arguments only", "TypeError")
    done, msg, _ = call("fn")
    expect_error(done, msg, "serialization_error", type_="SerializationError")
    done, msg, _ = call("boom")
    expect_error(done, msg, "runtime_error", "bad", "TypeError")
    check("main.js:7" in msg["error"]["stack"] and "runner" not in msg["error"]["stack"],
          "the user's stack", done)


def test_python_calls(runners):
    """entry: positional and keyword args, checked against the signature first (TypeError as a
    validation_error; python_session shows the function is not called); async functions awaited; EntryNotFound; a value
    that is not JSON; an exception with the user's traceback."""
    code = ("calls = []\ndef add(a, b, *, scale=1):\n    calls.append(1)\n"
            "    return (a + b) * scale\n"
            "async def slow(x):\n    import asyncio\n    await asyncio.sleep(0.005)\n"
            "    return [x]\nnotfn = 3\ndef aset():\n    return {1}\n"
            "def boom():\n    raise ValueError('bad')\n")

    def call(entry, **fields):
        return run(runners, "python", dict({"code": code, "entry": entry}, **fields))

    done, msg, _ = call("add", args=[2], kwargs={"b": 3, "scale": 10})
    expect_ok(done, msg, "50")
    done, msg, _ = call("slow", args=["v"])
    expect_ok(done, msg, '["v"]')
    done, msg, _ = call("missing")
    expect_error(done, msg, "validation_error", "entry 'missing': no function of that name is "
                 "defined", "EntryNotFound")
    done, msg, _ = call("notfn")
    expect_error(done, msg, "validation_error", "entry 'notfn' is not callable (it is int)",
                 "EntryNotFound")
    done, msg, _ = call("add", args=[1, 2], kwargs={"c": 2})
    expect_error(done, msg, "validation_error", type_="TypeError")
    check("add:" in msg["error"]["message"] and "'c'" in msg["error"]["message"],
          "the message names the function and the argument", done)
    done, msg, _ = call("add", args=[1, 2, 3])
    expect_error(done, msg, "validation_error", type_="TypeError")
    done, msg, _ = call("aset")
    expect_error(done, msg, "serialization_error", type_="SerializationError")
    done, msg, _ = call("boom")
    expect_error(done, msg, "runtime_error", "bad", "ValueError")
    check('File "main.py", line 13, in boom' in msg["error"]["stack"] and
          "runner.py" not in msg["error"]["stack"], "the user's traceback", done)


# ---- replay: the seed and the clock (docs/protocol.md, "Replay") ---------------------------

SEED_A = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SEED_B = "HxkZGhscHR4fICEiIyQlJicoKSorLC0uLzAxMjM0NTY="

# Every source of randomness each runner covers, printed; the clocks as the program sees them.
JS_RANDOM = """const c = require('node:crypto');
const { randomBytes: rb, randomUUID: ru } = await import('node:crypto');
const b = new Uint32Array(3);
const out = [Math.random(), Math.random(), c.randomBytes(8).toString('hex'), rb(4).toString('hex'),
    c.randomUUID(), ru(), crypto.randomUUID(), c.randomInt(1000000), c.randomInt(5, 9),
    Array.from(crypto.getRandomValues(new Uint16Array(4))), Array.from(c.getRandomValues(b)),
    c.randomFillSync(Buffer.alloc(6)).toString('hex'),
    await new Promise((r) => c.randomBytes(3, (e, x) => r(x.toString('hex'))))];
console.log(JSON.stringify(out));
out"""
PY_RANDOM = """import os, random, secrets, uuid
out = [random.random(), random.randint(0, 10**9), random.Random().random(), os.urandom(8).hex(),
       secrets.token_hex(8), secrets.randbelow(10**6), random.SystemRandom().random(),
       str(uuid.uuid4()), random.choice("abcdefgh"), random.sample(range(100), 3)]
print(out)
out"""
JS_CLOCK = """const t = [Date.now(), new Date().toISOString(), Date(), performance.now(), process.hrtime(),
    String(process.hrtime.bigint())];
await new Promise((r) => setTimeout(r, 15));
t.push(Date.now() - t[0] >= 10, performance.now());
console.log(JSON.stringify(t));
t"""
PY_CLOCK = """import asyncio, datetime, time
t = [time.time(), time.time_ns(), time.monotonic(), time.monotonic_ns(), time.perf_counter(),
     time.perf_counter_ns(), datetime.datetime.now().isoformat(), datetime.datetime.utcnow().isoformat(),
     datetime.datetime.today().isoformat(), datetime.date.today().isoformat(), time.strftime("%H:%M:%S")]
await asyncio.sleep(0.015)
t += [time.monotonic() - t[2] >= 0.01]
print(t)
t"""


def replay_run(runners, language, code, answers=None, **fields):
    logs = []
    done, msg, _ = run(runners, language, dict({"code": code}, **fields), answers, logs)
    expect_ok(done, msg)
    return whole_logs(done, logs)


def check_seeded(runners, language, code):
    """The same seed draws the same numbers twice, another seed others; the runs are
    replayable, and a run without a seed is not."""
    a1 = replay_run(runners, language, code, seed=SEED_A)
    a2 = replay_run(runners, language, code, seed=SEED_A)
    b = replay_run(runners, language, code, seed=SEED_B)
    check(a1["result"] == a2["result"], "the same seed draws the same", f"{a1}\n{a2}")
    # Each value differs but for a chance match of a small range (randomInt(5, 9), a choice).
    same = [x for x, y in zip(a1["result"], b["result"]) if x == y]
    check(len(same) <= 2 and a1["result"][0] != b["result"][0], "another seed draws otherwise",
          f"{a1['result']}\n{b['result']}")
    check(a1["replayable"] is True and "not_replayable" not in a1, "replayable", a1)
    none = replay_run(runners, language, code)
    check(none["replayable"] is False and "seed" in none["not_replayable"],
          "not replayable without a seed", none)
    check(none["result"] != a1["result"], "no seed: the system's randomness", none)


def drbg_stream(seed_b64, n):
    """The first @n bytes of the generator's stream for a seed, as guest-image/runners/README.md
    ("Randomness") defines it: chunk j = PBKDF2-HMAC-SHA256(seed, "sbx-drbg-1" || j as 8 bytes
    big-endian, 1 iteration, 4096 bytes), the chunks one after the other."""
    seed = base64.b64decode(seed_b64)
    return b"".join(hashlib.pbkdf2_hmac("sha256", seed, b"sbx-drbg-1" + j.to_bytes(8, "big"), 1,
                                        4096) for j in range(n // 4096 + 1))[:n]


def check_stream(runners, language, code):
    """A draw of 9000 bytes (past a chunk's end, twice) is the documented stream, from where
    the runner's own draws at the execute's start (Math.random's or random's seed) left it,
    though the program replaced the function the generator uses."""
    got = bytes.fromhex(replay_run(runners, language, code, seed=SEED_A)["result"])
    want = drbg_stream(SEED_A, 16384)
    at = want.find(got[:64])
    check(len(got) == 9000 and 0 <= at <= 64 and want[at:at + 9000] == got,
          "the stream is PBKDF2-HMAC-SHA256's, chunk by chunk", (len(got), at))


def test_js_seeded_random(runners):
    """Math.random, crypto's randomBytes/randomUUID/randomInt/getRandomValues/randomFillSync of
    node:crypto (CommonJS and ESM) and globalThis.crypto: one stream per seed, the documented
    one."""
    check_seeded(runners, "javascript", JS_RANDOM)
    check_stream(runners, "javascript", "const c = require('node:crypto');\n"
                 "c.pbkdf2Sync = () => Buffer.alloc(4096); // the program's: not the generator's\n"
                 "c.randomBytes(9000).toString('hex')")


def test_python_seeded_random(runners):
    """random (module functions, Random(), SystemRandom), os.urandom, secrets, uuid4: one
    stream per seed, the documented one. numpy's are checked in a VM (tests/integration
    replay_*): not on the host."""
    check_seeded(runners, "python", PY_RANDOM)
    check_stream(runners, "python", "import hashlib, os\n"
                 "hashlib.pbkdf2_hmac = lambda *a: bytes(4096)  # not the generator's\n"
                 "os.urandom(9000).hex()")


def check_clock(runners, language, code, reads):
    """Every clock read is logged; fed that log, the same program sees the same values while
    its timers keep their real timing; a log too short is a replay_divergence."""
    first = replay_run(runners, language, code, seed=SEED_A)
    log = first["clock_log"]
    check(len(log) >= reads and all(isinstance(v, int) and v >= 0 for v in log),
          f"at least {reads} clock reads logged", first)
    again = replay_run(runners, language, code, seed=SEED_A, clock_log=log)
    check(again["result"] == first["result"], "the replay sees the recorded clock",
          f"{first['result']}\n{again['result']}")
    check(again["clock_log"] == log and again["replayable"] is True, "the same log again", again)
    # A replay whose log is wrong in its values sees those values.
    shifted = replay_run(runners, language, code, seed=SEED_A, clock_log=[v + 10**6 for v in log])
    check(shifted["result"] != first["result"], "the replayed values are the log's", shifted)
    done, msg, _ = run(runners, language, {"code": code, "seed": SEED_A, "clock_log": log[:3]})
    expect_error(done, msg, "replay_divergence", type_="ReplayDivergence")
    check("clock read 4 is past the end of the recorded log (3 reads)" in msg["error"]["message"],
          "the divergence says where", done)
    # Caught by the program, it is still the done's verdict.
    catch = ("try {\n    Date.now();\n} catch (e) {}\n1" if language == "javascript"
             else "try:\n    import time; time.time()\nexcept Exception:\n    pass\n1")
    done, msg, _ = run(runners, language, {"code": catch, "seed": SEED_A, "clock_log": []})
    expect_error(done, msg, "replay_divergence", type_="ReplayDivergence")


def test_js_clock_replay(runners):
    """Date.now, new Date(), Date(), performance.now, process.hrtime(.bigint) logged and
    replayed; setTimeout keeps real time."""
    check_clock(runners, "javascript", JS_CLOCK, 8)


def test_python_clock_replay(runners):
    """time.time/time_ns/monotonic(_ns)/perf_counter(_ns), datetime.now/utcnow/today,
    date.today, strftime logged and replayed; asyncio.sleep keeps real time."""
    check_clock(runners, "python", PY_CLOCK, 12)


def check_not_replayable(runners, language, cases):
    for code, why in cases:
        msg = replay_run(runners, language, code, seed=SEED_A)
        check(msg["replayable"] is False and why in msg.get("not_replayable", ""),
              f"not replayable: {why}", f"{code}\n{msg}")
    msg = replay_run(runners, language, "1", seed=SEED_A)
    check(msg["replayable"] is True, "a plain program is replayable", msg)


def test_js_not_replayable(runners):
    """Worker threads, child processes and /dev/urandom through fs are detected."""
    check_not_replayable(runners, "javascript", [
        ("const { Worker } = require('worker_threads');\n"
         "const w = new Worker('1', { eval: true });\n"
         "await new Promise((r) => w.on('exit', r));\n1", "worker_threads.Worker"),
        ("const { Worker } = await import('node:worker_threads');\n"
         "const w = new Worker('1', { eval: true });\n"
         "await new Promise((r) => w.on('exit', r));\n1", "worker_threads.Worker"),
        ("require('child_process').execSync('true');\n1", "child_process.execSync"),
        ("const cp = await import('node:child_process');\ncp.spawnSync('true');\n1",
         "child_process.spawnSync"),
        ("const fs = require('fs');\nfs.closeSync(fs.openSync('/dev/urandom'));\n1",
         "opened /dev/urandom"),
        ("const fsp = await import('node:fs/promises');\n"
         "await (await fsp.open('/dev/random')).close();\n1", "opened /dev/random"),
    ])


def test_python_not_replayable(runners):
    """Threads (threading, concurrent.futures), processes (os.fork, multiprocessing,
    subprocess) and /dev/urandom through open() are detected."""
    check_not_replayable(runners, "python", [
        ("import threading\nt = threading.Thread(target=len, args=[()])\nt.start()\nt.join()\n1",
         "a thread was started"),
        ("import concurrent.futures as f\nwith f.ThreadPoolExecutor() as x:\n"
         "    x.submit(len, ()).result()\n1", "a thread was started"),
        ("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\n1",
         "a process was forked"),
        ("import multiprocessing as m\np = m.Process(target=len, args=[()])\np.start()\n"
         "p.join()\n1", "a process was forked"),
        ("import subprocess\nsubprocess.run(['true'])\n1", "a process was started (subprocess)"),
        ("with open('/dev/urandom', 'rb') as f:\n    f.read(4)\n1", "opened /dev/urandom"),
        ("import pathlib\npathlib.Path('/dev/random').open('rb').close()\n1",
         "opened /dev/random"),
    ])


def test_clock_log_limit(runners):
    """Past SBX_CLOCK_READS_MAX reads the log stops and the run is not replayable."""
    for language, code in [("javascript", "for (let i = 0; i < 100005; i++) Date.now();\n1"),
                           ("python", "import time\nfor _ in range(100005):\n    time.time()\n1")]:
        msg = replay_run(runners, language, code, seed=SEED_A)
        check(len(msg["clock_log"]) == 100000 and msg["replayable"] is False and
              "too many clock reads" in msg["not_replayable"], f"{language}: the log's limit",
              str(msg)[:500])


# ---- the order of deliveries and open logs (docs/protocol.md, "Replay") ----------------------



def slow_answer(delay):
    """A tool answer given after @delay seconds."""
    def answer(msg):
        time.sleep(delay)
        return '"ok":true,"result":1'
    return answer


def check_event_order(runners, language):
    """A timer racing a tool result: each run logs which came first (2: the first timer, 3: the
    first call's result); a replay given that order takes the recorded branch even when the
    other delivery comes first in real time; a replay that delivers fewer events diverges."""
    code = programs.timer_race(language, "slow", 150)
    run_ = lambda answers, **f: replay_run(runners, language, code, answers=answers,  # noqa
                                           seed=SEED_A, tools=tools("slow"), **f)
    timer = run_({"slow": slow_answer(0.6)})
    check(timer["result"] == "timer" and timer["event_log"][:1] == [2], "the timer first", timer)
    tool = run_({"slow": '1'})
    check(tool["result"] == "tool" and tool["event_log"][:1] == [3], "the tool first", tool)
    # Replayed with the other real order: the recorded branch, and the same event log.
    again = run_({"slow": '1'}, event_log=timer["event_log"], clock_log=timer["clock_log"])
    check(again["result"] == "timer" and again["event_log"] == timer["event_log"],
          "the timer's branch, though the tool answered first", again)
    again = run_({"slow": slow_answer(0.6)}, event_log=tool["event_log"],
                 clock_log=tool["clock_log"])
    check(again["result"] == "tool" and again["event_log"] == tool["event_log"],
          "the tool's branch, though the timer fired first", again)
    done, msg, _ = run(runners, language, {"code": code, "seed": SEED_A, "tools": tools("slow"),
                                          "event_log": tool["event_log"] + [2, 2]},
                       {"slow": '1'})
    expect_error(done, msg, "replay_divergence", type_="ReplayDivergence")
    check("recorded" in msg["error"]["message"], "the divergence says why", done)


def check_session_events(runners, language):
    """A session's timer of an earlier cell that fires during a later one is not the later
    cell's event: each cell's log has its own timers only, counted from 1."""
    cells = {"javascript": ["setTimeout(() => {}, 300);\n1",
                            "await new Promise((r) => setTimeout(r, 800));\n2"],
             "python": ["import asyncio\nasyncio.get_running_loop().call_later(0.3, print, '')\n"
                        "await asyncio.sleep(0)\n1",
                        "await asyncio.sleep(0.8)\n2"]}[language]

    def body(s):
        s.value(cells[0], seed=SEED_A)
        done, msg = s.cell(cells[1], seed=SEED_A)
        check(msg["status"] == "ok", "the second cell", done)
        events = [v for m in s.logs for v in m.get("events", [])]
        check(events == [2], "its own timer only", f"{events} {s.logs}")

    session(runners, language, body)


def test_js_event_order(runners):
    check_event_order(runners, "javascript")
    check_session_events(runners, "javascript")


def test_python_event_order(runners):
    check_event_order(runners, "python")
    check_session_events(runners, "python")


SHOW_THEN_HANG = {
    "javascript": "const t = Date.now();\nconsole.log(String(t));\n"
                  "await new Promise(() => setInterval(() => {}, 1000));",
    "python": "import time\nt = time.time_ns()\nprint(t // 1000, flush=True)\n"
              "import asyncio\nawait asyncio.Event().wait()",
}


def check_log_open(runners, language):
    """The clock read before an output reaches the channel before it, though the run never
    ends; replayed with log_open, a read or an event past the logs' ends waits (no done)
    instead of diverging."""
    r = Runner(runners, language)
    try:
        x = {"type": "execute", "id": "x1", "tools": [], "language": language,
             "code": SHOW_THEN_HANG[language], "seed": SEED_A}
        r.sock.sendall(frame(json.dumps(x)))
        msg = json.loads(r.recv())
        check(msg["type"] == "replay_log" and len(msg.get("clock", [])) == 1,
              "the read goes out before the output", msg)
        # JavaScript shows milliseconds, Python microseconds (the log's unit).
        shown = str(msg["clock"][0] // (1000 if language == "javascript" else 1))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and shown not in r.log():
            time.sleep(0.05)
        check(shown in r.log(), "the output shows the read", r.log())
    finally:
        r.proc.kill()
        r.proc.wait()
        r.close()
    waits = {"javascript": ["Date.now();\n1", "await new Promise((r) => setTimeout(r, 5));\n1"],
             "python": ["import time\ntime.time()\n1",
                        "import asyncio\nawait asyncio.sleep(0.005)\n1"]}[language]
    for code in waits:
        r = Runner(runners, language)
        try:
            x = {"type": "execute", "id": "x1", "tools": [], "language": language, "code": code,
                 "seed": SEED_A, "clock_log": [], "event_log": [], "log_open": True}
            r.sock.sendall(frame(json.dumps(x)))
            r.sock.settimeout(1.5)
            try:
                got = r.recv()
            except socket.timeout:
                got = None
            check(got is None, f"log_open: {code!r} waits", got)
        finally:
            r.proc.kill()
            r.proc.wait()
            r.close()
    # Without log_open, the event past the end is the divergence (the run ended short of it
    # never happens: the timer's promise never settles).
    done, msg, _ = run(runners, language, {"code": waits[0], "seed": SEED_A, "clock_log": []})
    expect_error(done, msg, "replay_divergence", type_="ReplayDivergence")


def test_js_log_open(runners):
    check_log_open(runners, "javascript")


def test_python_log_open(runners):
    check_log_open(runners, "python")


TESTS = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("test_")}


def main():
    if len(sys.argv) != 3 or (sys.argv[2] not in TESTS and sys.argv[2] != "all"):
        print(f"usage: {sys.argv[0]} RUNNERS {{all|{'|'.join(TESTS)}}}", file=sys.stderr)
        return 2
    runners = os.path.abspath(sys.argv[1])
    names = list(TESTS) if sys.argv[2] == "all" else [sys.argv[2]]
    failed = 0
    for name in names:
        try:
            TESTS[name](runners)
            print(f"PASS {name}")
        except (Failure, OSError, ValueError, subprocess.SubprocessError) as e:
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
