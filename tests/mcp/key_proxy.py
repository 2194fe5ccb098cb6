"""A reverse proxy on 127.0.0.1 that adds a tenant's API key to every request, for clients that
cannot send one (the MCP conformance suite's server mode connects without headers): as a gateway
in front of the service would. Everything else goes through unchanged, Host and Origin included,
so the server's own checks of them are what the client sees.

One request per connection: the server answers every request with `Connection: close`
(docs/decisions.md), so after the request's headers the proxy only copies bytes both ways.
Bounded: request headers at most 64 KiB, every socket with a timeout; the listener ends with
close(). Threads are daemons of the test process.
"""
import socket
import threading

HEADERS_MAX = 64 * 1024  # a request's headers; the suite's are a few hundred bytes
IDLE_S = 120  # a socket with nothing to read for this long is closed (an execution takes less)


class KeyProxy:
    def __init__(self, upstream_port, key):
        self.upstream_port, self.key = upstream_port, key
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.closed = True
        self.sock.close()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        up = None
        try:
            conn.settimeout(IDLE_S)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk or len(head) > HEADERS_MAX:
                    return
                head += chunk
            line_end = head.index(b"\r\n")
            head = (head[:line_end + 2] + f"Authorization: Bearer {self.key}\r\n".encode() +
                    head[line_end + 2:])
            up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=IDLE_S)
            up.sendall(head)
            threading.Thread(target=self._pipe, args=(conn, up), daemon=True).start()
            self._pipe(up, conn)
        except OSError:
            pass
        finally:
            conn.close()
            if up is not None:
                up.close()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
