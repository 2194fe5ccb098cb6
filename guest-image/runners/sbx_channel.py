"""The runner channel: fd 3, a stream socket to the guest agent, carrying the protocol's frames
(4-byte big-endian length + one JSON object; docs/protocol.md, "Runner channel").

The main thread reads `execute`; then a reader thread delivers each `tool_result` to whoever
waits for it: a blocked caller (threading.Event) or an asyncio future (call_soon_threadsafe),
and a session's next `execute` to the main thread (next_execute).
Call ids are taken and frames written under one lock, so ids reach the agent in increasing
order, as it requires.
"""
import collections
import json
import select
import socket
import struct
import threading

import sbx_json

# SBX_FRAME_MAX in host-agent/protocol/limits.h: the agent refuses anything longer.
FRAME_MAX = 4 * 1024 * 1024

# SBX_TOOL_CALLS_IN_FLIGHT_MAX in host-agent/protocol/limits.h: the agent refuses a call beyond
# it. Calls beyond wait here, in the program's own memory, and go out as answers come back, so
# asyncio.gather over any number of calls just works.
CALLS_IN_FLIGHT_MAX = 64
CALL_ID_MAX = 2**32 - 1  # the widest id, to size a queued call's frame


class ChannelClosed(Exception):
    pass


def encode(message):
    """One frame for @message, or None when it is larger than FRAME_MAX."""
    body = json.dumps(message, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")
    if len(body) > FRAME_MAX:
        return None
    return struct.pack(">I", len(body)) + body


class Channel:
    def __init__(self, fd):
        self._sock = socket.socket(fileno=fd)
        self._send_lock = threading.Lock()
        self._next_id = 1
        self._waiting = {}  # call id -> function(message)
        self._queued = collections.deque()  # (head, deliver) beyond CALLS_IN_FLIGHT_MAX
        self._closed = False
        # A session's next execute, from the reader thread; None: the end of the channel.
        self._executes = collections.deque()
        self._executes_ready = threading.Condition(threading.Lock())

    def _recv_exact(self, n):
        chunks = []
        while n:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ChannelClosed()
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def readable(self, timeout):
        """True if a message (or the end) arrives within @timeout seconds."""
        return bool(select.select([self._sock], [], [], timeout)[0])

    def read(self):
        """The next message; raises ChannelClosed at the end. An integer of more digits than
        Python converts does not fail the message: it is left in it (sbx_json.loads), for the
        one who uses that value to convert it (a tool result: the call; the args)."""
        (length,) = struct.unpack(">I", self._recv_exact(4))
        if length == 0 or length > FRAME_MAX:
            raise ChannelClosed()
        return sbx_json.loads(self._recv_exact(length))

    def send(self, frame):
        with self._send_lock:
            self._sock.sendall(frame)

    def start_reader(self):
        threading.Thread(target=self._read_results, name="sbx-channel", daemon=True).start()

    def _read_results(self):
        try:
            while True:
                msg = self.read()
                if msg.get("type") == "execute":
                    self._put_execute(msg)
                if msg.get("type") != "tool_result":
                    continue
                with self._send_lock:
                    deliver = self._waiting.pop(msg.get("call_id"), None)
                    if deliver and self._queued:
                        self._send_call(*self._queued.popleft())
                if deliver:
                    deliver(msg)
        except (ChannelClosed, OSError, ValueError):
            pass
        # Nobody will answer now: wake every waiter with an error.
        with self._send_lock:
            self._closed = True
            waiting = list(self._waiting.values()) + [d for _, d in self._queued]
            self._waiting = {}
            self._queued.clear()
        self._put_execute(None)
        gone = {"ok": False, "error": {"code": "internal_error",
                                       "message": "the guest agent closed the runner channel"}}
        for deliver in waiting:
            deliver(gone)

    def _put_execute(self, msg):
        with self._executes_ready:
            self._executes.append(msg)
            self._executes_ready.notify()

    def next_execute(self):
        """A session's next execute (blocks); raises ChannelClosed at the end."""
        with self._executes_ready:
            self._executes_ready.wait_for(lambda: self._executes)
            if self._executes[0] is None:
                raise ChannelClosed()
            return self._executes.popleft()

    def abandon_calls(self):
        """A session's execute is over: its calls still waiting fail (the agent drops late
        results), and stop counting against the limit."""
        with self._send_lock:
            waiting = list(self._waiting.values()) + [d for _, d in self._queued]
            self._waiting = {}
            self._queued.clear()
        over = {"ok": False, "error": {"code": "tool_error",
                                       "message": "the execution that made this call is over"}}
        for deliver in waiting:
            deliver(over)

    def call(self, head, deliver, log=None):
        """Send a tool_call (@head without call_id) whose result goes to @deliver(message), with
        the replay logs' entries of @log (a replay_log message, or None) as its members (one
        frame less a call for the agent and the host), or in a frame before it when the call
        waits for its turn or both do not fit a frame. Returns False if the call is too large."""
        before = encode(log) if log is not None else None
        with self._send_lock:
            if self._closed:
                raise ChannelClosed()
            if len(self._waiting) < CALLS_IN_FLIGHT_MAX:
                return self._send_call(head, deliver, log, before)
            if before:
                self._sock.sendall(before)
            # Ids go out in increasing order (the agent requires it): a queued call takes its
            # id when it is sent; its size is checked now, with the widest id.
            if encode(dict(head, call_id=CALL_ID_MAX)) is None:
                return False
            self._queued.append((head, deliver))
            return True

    def _send_call(self, head, deliver, log=None, before=None):
        """Send @head with the next call id (under the send lock), with @log's entries in it,
        else after @before if any; False if too large (@before is sent all the same)."""
        call_id = self._next_id
        frame = None
        if log is not None:
            frame = encode(dict(head, call_id=call_id,
                                **{k: v for k, v in log.items() if k not in ("type", "id")}))
            before = None if frame is not None else before
        if frame is None:
            frame = encode(dict(head, call_id=call_id))
        if frame is None:
            if before:
                self._sock.sendall(before)
            return False
        self._next_id += 1
        self._waiting[call_id] = deliver
        self._sock.sendall(before + frame if before else frame)
        return True
