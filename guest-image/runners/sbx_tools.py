"""The tool namespace: tools.<provider>.<tool>(input) calls a host tool and returns its result
(blocking); `await tools.<provider>.<tool>.aio(input)` is the same call for asyncio code, so that
asyncio.gather() runs calls in parallel. A failed call raises a SandboxToolError subclass:
ToolError, ValidationError, PolicyDenied. Keyword arguments are the input too:
tools.calc.add(a=1, b=2) is tools.calc.add({"a": 1, "b": 2}).
"""
import asyncio
import threading

import sbx_replay
from sbx_channel import ChannelClosed
from sbx_json import HoldsBigInts, SerializationError, check, convert


class SandboxToolError(Exception):
    """A tool call failed; .code is the protocol's error code ("tool_error", ...)."""
    code = "tool_error"

    def __init__(self, message, code=None, type=None, stack=None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.type = type  # the provider's own error type, if it gave one
        self.remote_stack = stack

    def __repr__(self):
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ToolError(SandboxToolError):
    code = "tool_error"


class ValidationError(SandboxToolError):
    code = "validation_error"


class PolicyDenied(SandboxToolError):
    code = "policy_denied"


_BY_CODE = {c.code: c for c in (ToolError, ValidationError, PolicyDenied)}

# They are globals of the user's code, like builtins: tracebacks say "ToolError: ...".
for _cls in (SandboxToolError, ToolError, ValidationError, PolicyDenied):
    _cls.__module__ = "builtins"


def _outcome(msg, tool):
    if msg.get("ok"):
        if not isinstance(msg, HoldsBigInts):
            return msg.get("result")
        # An integer of more digits than Python converts (sbx_json.loads): converted here,
        # with the limit in force now, or this call fails, in the code that made it.
        try:
            return convert(msg.get("result"), "result")
        except ValueError as e:
            raise ValueError(f"tools.{tool._provider}.{tool._name}: {e}") from None
    err = msg.get("error") or {}
    cls = _BY_CODE.get(err.get("code"), SandboxToolError)
    raise cls(err.get("message", ""), err.get("code"), err.get("type"), err.get("stack"))


def _input(provider, name, value, kwargs):
    if kwargs:
        if value is not None:
            raise TypeError(f"{provider}.{name}: pass the input as one dict or as keywords, "
                            "not both")
        value = kwargs
    value = {} if value is None else value
    check(value, "input")
    return value


class Tool:
    def __init__(self, runner, provider, name, description):
        self._runner, self._provider, self._name = runner, provider, name
        self.__doc__ = description

    def __repr__(self):
        return f"<tool {self._provider}.{self._name}>"

    def _head(self, value):
        return {"type": "tool_call", "id": self._runner.exec_id, "provider": self._provider,
                "tool": self._name, "input": value}

    def _send(self, value, deliver):
        if self._runner.finished:
            raise ToolError(f"{self._provider}.{self._name}: the execution that made this call "
                            "is over", "tool_error")
        # What the program read goes out with the call (sbx_channel.py: in its frame).
        log = sbx_replay.take_log()
        if not self._runner.channel.call(self._head(value), deliver, log):
            raise SerializationError(f"input of {self._provider}.{self._name} is too large "
                                     "(a message is at most 4 MiB)")

    def __call__(self, input=None, /, **kwargs):
        value = _input(self._provider, self._name, input, kwargs)
        box, ready = [], threading.Event()
        self._send(value, lambda msg: (box.append(msg), ready.set()))
        ready.wait()
        return _outcome(box[0], self)

    async def aio(self, input=None, /, **kwargs):
        value = _input(self._provider, self._name, input, kwargs)
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(msg):
            if not future.done():
                future.set_result(msg)

        # Handed to the coroutine in the order recorded, in a replay (sbx_replay.deliver).
        tag = sbx_replay.call_event()
        self._send(value, lambda msg: loop.call_soon_threadsafe(
            sbx_replay.deliver, tag, lambda: settle(msg)))
        return _outcome(await future, self)


class _Namespace:
    """Attribute access with a helpful error for names that do not exist."""

    def __init__(self, what, members):
        self.__dict__.update(members)
        self._sbx_what = what

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        known = ", ".join(k for k in self.__dict__ if not k.startswith("_")) or "none"
        raise AttributeError(f"{self._sbx_what} has no {name!r} (available: {known})")

    def __dir__(self):
        return [k for k in self.__dict__ if not k.startswith("_")]


def make_tools(runner, decls):
    providers = {}
    for d in decls or []:
        providers.setdefault(d["provider"], {})[d["name"]] = Tool(
            runner, d["provider"], d["name"], d.get("description"))
    return _Namespace("tools", {p: _Namespace(f"tools.{p}", t) for p, t in providers.items()})


__all__ = ["SandboxToolError", "ToolError", "ValidationError", "PolicyDenied", "ChannelClosed",
           "make_tools"]
