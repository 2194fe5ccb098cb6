"""Only JSON values cross the sandbox boundary. check() says exactly why a value cannot, where
json.dumps would convert it quietly (tuples, int keys) or fail vaguely.
"""
import math

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


def _scalar(v, path):
    """True if @v is a valid scalar, False if it is a container; raises otherwise."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, str):
        _string(v, path)
        return True
    if isinstance(v, int):
        if abs(v) > 2 ** 1023:
            raise _refuse(path, "an integer too large for JSON (it would become infinity)")
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
