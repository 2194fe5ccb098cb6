"""What the Python tests share about processes and the local server (one copy, not one per
test): whether a PID is alive, the processes below one, the ones whose command line mentions a
path (to find leftovers, never to kill by name), and `sandbox serve`'s status over its Unix
socket (docs/pool.md, "Client protocol").

A test imports it with:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import procs  # noqa: E402
"""
import json
import os
import socket
import struct


def alive(pid):
    """Whether @pid runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants(pid):
    """The set of PIDs whose parent chain reaches @pid (from /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in out:
                out.add(c)
                todo.append(c)
    return out


def processes_mentioning(text):
    """PIDs whose command line contains @text (to find leftovers; never to kill by name)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def serve_status(sock_path, timeout=5.0):
    """`sandbox serve`'s answer to {"type":"status"} on its socket. Raises OSError (no server,
    a timeout) or RuntimeError (the connection closed before the answer)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        body = b'{"type":"status"}'
        s.sendall(struct.pack(">I", len(body)) + body)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("status: connection closed")
            buf += chunk
        return json.loads(buf[4:4 + struct.unpack(">I", buf[:4])[0]])
