"""The guest protocol's framing (docs/protocol.md, "Frames": a 4-byte big-endian length, then
the payload), as the Python tests speak it to `sandbox serve`'s socket or play its peer."""
import json
import struct


def frame(obj):
    """@obj in a frame: bytes as they are, str as UTF-8, anything else as JSON (UTF-8 raw, as
    JSON allows: DEL and C1 characters unescaped)."""
    if isinstance(obj, bytes):
        data = obj
    elif isinstance(obj, str):
        data = obj.encode()
    else:
        data = json.dumps(obj, ensure_ascii=False).encode()
    return struct.pack(">I", len(data)) + data


def recv_exact(conn, n):
    """@n bytes from the socket @conn, or None if it closed first."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def recv_payload(conn):
    """The next frame's payload from @conn, or None if it closed first."""
    head = recv_exact(conn, 4)
    return None if head is None else recv_exact(conn, struct.unpack(">I", head)[0])
