"""Only JSON values cross the sandbox boundary. check() says exactly why a value cannot, where
json.dumps would convert it quietly (tuples, int keys) or fail vaguely.

Numbers cross as text, unchanged: the host forwards each number literal as it is. json.dumps
prints an int exactly and a float in its shortest round trip form (-0.0 as -0.0); json.loads
makes of a literal what Python makes of it anywhere: an exact int, a float (1e400 is inf).
Python's one limit is its own: int <-> str conversion refuses more than
sys.get_int_max_str_digits() digits (4300 unless the code changes it). check() refuses such an
int at its path; loads() leaves such a literal in a received message as a BigInt, converted by
convert() where the value is used (see there).
"""
import json
import math
import sys

# SBX_JSON_DEPTH_MAX (32) minus the message object around the value, minus one spare level.
DEPTH_MAX = 30


class SerializationError(Exception):
    code = "serialization_error"


def _refuse(path, what, hint=""):
    return SerializationError(
        f"{path} is {what}: only JSON values (dict with str keys, list, tuple, str, int, finite "
        f"float, bool, None) can cross the sandbox boundary{hint}")


def _string(s, path):
    # The protocol refuses \u0000 (C strings end there) and text that is not Unicode.
    if "\0" in s:
        raise SerializationError(f"{path}: a string contains a NUL character (\\0)")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(f"{path}: a string is not valid Unicode (lone surrogate)")


def _limit_hint(limit):
    return (f"Python converts integers of at most {limit} digits to and from text "
            f"(sys.get_int_max_str_digits()); raise the limit with "
            f"sys.set_int_max_str_digits(n), or 0 for none")


# log2(10) is 3.3219...: an int of at most 3.32 * N bits has at most N digits, one of at
# least 3.33 * N + 1 bits has more. The smallest limit but 0 (none) is 640.
_BITS_ALWAYS_PRINTABLE = int(3.32 * 640)


def _long_int(v, path):
    """Refuse @v if json.dumps cannot print it: more digits than Python's limit."""
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        return
    bits = v.bit_length()
    if bits <= 3.32 * limit or (bits - 1 < 3.33 * limit and abs(v) < 10 ** limit):
        return
    raise SerializationError(f"{path} is an integer of more than {limit} digits: "
                             f"{_limit_hint(limit)}")


def _scalar(v, path):
    """True if @v is a valid scalar, False if it is a container; raises otherwise."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, str):
        _string(v, path)
        return True
    if isinstance(v, int):
        if v.bit_length() > _BITS_ALWAYS_PRINTABLE:
            _long_int(v, path)
        return True
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _refuse(path, repr(v))
        return True
    if isinstance(v, (dict, list, tuple)):
        return False
    hint = "; did you forget an await?" if hasattr(v, "__await__") else ""
    raise _refuse(path, f"a {type(v).__name__}", hint)


def check(value, path):
    """Raise SerializationError unless @value is a JSON value (cycles and depth included)."""
    open_ids = set()

    def walk(v, where, depth):
        if _scalar(v, where):
            return
        if depth >= DEPTH_MAX:
            raise SerializationError(f"{where}: nested deeper than {DEPTH_MAX} levels")
        if id(v) in open_ids:
            raise SerializationError(f"{where}: circular reference")
        open_ids.add(id(v))
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise SerializationError(
                        f"{where}: key {k!r} is a {type(k).__name__}; JSON keys are strings")
                _string(k, where)
                walk(x, f"{where}[{k!r}]", depth + 1)
        else:
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]", depth + 1)
        open_ids.discard(id(v))

    walk(value, path, 0)


# --- received messages ------------------------------------------------------------------------

class BigInt:
    """An integer literal of a received message that Python would not convert (more digits
    than sys.get_int_max_str_digits()): its text, until convert() makes it an int."""
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


def _parse_int(text):
    try:
        return int(text)
    except ValueError:
        return BigInt(text)


class HoldsBigInts(dict):
    """A message (an object) in which loads() left BigInts: its values need convert()."""


def loads(data):
    """The message in @data (bytes of JSON text). An integer of more digits than Python
    converts is left in it as a BigInt, and the message is then a HoldsBigInts.

    json.loads fails on the whole message for one such integer (a plain ValueError, not a
    JSONDecodeError), though only the value that holds it is at stake: a tool result (that
    call must fail, not the channel) or the args. So only then is the message decoded again,
    every integer through _parse_int (slower: a Python call each, where json.loads converts in
    C). The limit applies again where the value is used (convert): the code may have raised it
    meanwhile."""
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        raise
    except ValueError:
        msg = json.loads(data, parse_int=_parse_int)
        return HoldsBigInts(msg) if isinstance(msg, dict) else msg


def convert(value, path):
    """@value (from a HoldsBigInts) with each BigInt converted to an int; a ValueError that
    names its path and the limit for one that still has too many digits."""
    if isinstance(value, BigInt):
        try:
            return int(value.text)
        except ValueError:
            limit = sys.get_int_max_str_digits()
            digits = len(value.text.lstrip("-"))
            raise ValueError(f"{path} is an integer of {digits} digits: "
                             f"{_limit_hint(limit)}") from None
    if isinstance(value, list):
        return [convert(x, f"{path}[{i}]") for i, x in enumerate(value)]
    if isinstance(value, dict):
        return {k: convert(x, f"{path}[{k!r}]") for k, x in value.items()}
    return value
