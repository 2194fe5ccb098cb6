"""A small client of the HTTP API of `sandbox serve --listen` for the tests (docs/api.md):
start a server on 127.0.0.1 with its own store, socket and runtime directory, make tenants,
send requests with python3-requests, read event streams, check bodies against the OpenAPI
document's schemas, and stop the server leaving nothing behind. Every process is tracked by
PID; every wait is bounded and fails with a message."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

alive = procs.alive
descendants = procs.descendants
unix_status = procs.serve_status

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
OPENAPI = os.path.join(TOP, "host-agent", "server", "openapi.json")
VALIDATE = os.path.join(HERE, "validate-openapi.mjs")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
REQUEST_TIMEOUT = 30  # seconds for one request that does not wait for an execution


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to 0, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.1):
    """Whether @pred() became true within @timeout seconds (exceptions count as false)."""
    end = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return True
        except (OSError, RuntimeError, ValueError, KeyError, requests.RequestException):
            pass
        if time.monotonic() >= end:
            return False
        time.sleep(interval)


def vm_pids(status):
    """Every QEMU PID a status message names, over all its profiles."""
    out = set()
    for p in [status, *status.get("profiles", {}).values()]:
        for k in ("ready_pids", "running_pids", "prestarted_pids", "session_pids"):
            out.update(p.get(k, []))
    return out


class Server:
    """`sandbox serve --listen 127.0.0.1:PORT` on a store @db, in scratch dir @tmp."""

    def __init__(self, sandbox, tmp, db, name="serve", pool=2, catalogs_dir=None, extra=(),
                 tls=None):
        """@tls: (certificate, key) PEM files: HTTPS, the certificate trusted by requests."""
        self.sandbox, self.tmp, self.db, self.name = sandbox, tmp, db, name
        self.pool, self.catalogs_dir, self.extra = pool, catalogs_dir, list(extra)
        self.tls = tls
        self.verify = tls[0] if tls else True
        self.sock = os.path.join(tmp, name + "-sock", "sandbox.sock")
        self.rt = os.path.join(tmp, name + "-rt")
        self.log_path = os.path.join(tmp, name + ".log")
        self.proc, self.port, self.seen_pids = None, None, set()
        os.makedirs(self.rt, 0o700, exist_ok=True)

    @property
    def base(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def env(self):
        return dict(os.environ, SANDBOX_SERVE_SOCKET=self.sock, XDG_RUNTIME_DIR=self.rt)

    def start(self, timeout=240):
        """Start and wait for GET /v1/health; None, or why it did not come up."""
        self.port = free_port()
        args = [self.sandbox, "serve", "--listen", f"127.0.0.1:{self.port}", "--db", self.db,
                "--socket", self.sock, "--pool", str(self.pool)]
        if self.catalogs_dir:
            args += ["--catalogs-dir", self.catalogs_dir]
        if self.tls:
            args += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(args + self.extra, env=self.env(), stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL)
        end = time.monotonic() + timeout  # the first start may make the snapshot
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return f"{' '.join(args)} exited {self.proc.returncode}:\n{self.log()}"
            try:
                if requests.get(self.base + "/v1/health", timeout=5,
                                verify=self.verify).status_code == 200:
                    self.track()
                    return None
            except requests.RequestException:
                pass
            time.sleep(0.2)
        return f"no answer on /v1/health within {timeout} s:\n{self.log()}"

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def track(self):
        """Remember the server's children and QEMUs now (to check they are gone later)."""
        if self.proc is not None and self.proc.poll() is None:
            self.seen_pids |= descendants(self.proc.pid)
            try:
                self.seen_pids |= vm_pids(unix_status(self.sock))
            except (OSError, RuntimeError, ValueError):
                pass
        return set(self.seen_pids)

    def status(self):
        return unix_status(self.sock)

    def kill9(self):
        """SIGKILL the server (its children are left to it); their PIDs as last seen."""
        pids = self.track()
        self.proc.kill()
        self.proc.wait(timeout=30)
        return pids

    def stop(self, grace=30):
        """SIGTERM, SIGKILL after @grace s; its exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.track()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            return None

    def leftovers(self, timeout=15):
        """The tracked PIDs still alive after @timeout s; those are killed (by PID)."""
        wait_until(lambda: not any(alive(p) for p in self.seen_pids), timeout)
        left = sorted(p for p in self.seen_pids if alive(p))
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        return left

    # Requests.
    def request(self, method, path, key=None, headers=None, timeout=REQUEST_TIMEOUT, **kw):
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = "Bearer " + key
        kw.setdefault("verify", self.verify)
        return requests.request(method, self.base + path, headers=h, timeout=timeout, **kw)

    def create(self, key, body, wait=None, timeout=None):
        path = "/v1/executions" + (f"?wait={wait}" if wait is not None else "")
        return self.request("POST", path, key, json=body,
                            timeout=timeout or (wait or 0) + REQUEST_TIMEOUT)

    def get(self, key, ex_id, wait=None):
        path = f"/v1/executions/{ex_id}" + (f"?wait={wait}" if wait is not None else "")
        return self.request("GET", path, key, timeout=(wait or 0) + REQUEST_TIMEOUT)

    def wait_done(self, key, ex_id, timeout=180):
        """The execution object once it ended (polling ?wait=), or the last one seen."""
        end, last = time.monotonic() + timeout, None
        while time.monotonic() < end:
            r = self.get(key, ex_id, wait=min(30, max(1, int(end - time.monotonic()))))
            if r.status_code != 200:
                return r.json() if is_json(r) else {"http_status": r.status_code}
            last = r.json()
            if last.get("status") not in ("queued", "running"):
                return last
        return last

    def events(self, key, ex_id, ndjson=False, timeout=120):
        """(http status, content type, [(event, data)], whether it ended) of the stream."""
        accept = "application/x-ndjson" if ndjson else "text/event-stream"
        with self.request("GET", f"/v1/executions/{ex_id}/events", key, stream=True,
                          headers={"Accept": accept}, timeout=timeout) as r:
            ctype = r.headers.get("Content-Type", "")
            if r.status_code != 200:
                return r.status_code, ctype, [], False
            out, ended, end = [], False, time.monotonic() + timeout
            parse = parse_ndjson if ndjson else parse_sse
            for ev in parse(r.iter_lines(decode_unicode=False)):
                out.append(ev)
                if time.monotonic() > end:
                    break
            else:
                ended = True
            return r.status_code, ctype, out, ended


def parse_sse(lines):
    """(event, data as JSON) of each server-sent event; data lines joined with \\n."""
    name, data = None, []
    for raw in lines:
        line = raw.decode("utf-8")
        if line == "":
            if name is not None or data:
                yield name or "message", json.loads("\n".join(data)) if data else None
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].lstrip(" ")
        elif line.startswith("data:"):
            data.append(line[5:][1:] if line[5:].startswith(" ") else line[5:])
    if name is not None or data:
        yield name or "message", json.loads("\n".join(data)) if data else None


def parse_ndjson(lines):
    for raw in lines:
        if raw.strip():
            obj = json.loads(raw)
            yield obj.get("event"), obj.get("data")


def is_json(r):
    return r.headers.get("Content-Type", "").split(";")[0].strip() == "application/json"


def tenant(sandbox, db, verb, name, *opts):
    """`sandbox tenant VERB NAME --db DB OPTS...`: the key it printed (add, rotate-key)."""
    p = subprocess.run([sandbox, "tenant", verb, "--db", db, *opts, name], capture_output=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"sandbox tenant {verb} {name}: exit {p.returncode}: "
                           f"{p.stderr.decode(errors='replace')}")
    return p.stdout.decode().strip()


def load_openapi():
    with open(OPENAPI) as f:
        return json.load(f)


def conforms(doc, value, schema, where="$"):
    """The ways @value breaks @schema (the subset of JSON Schema openapi.json uses)."""
    while "$ref" in schema:
        node = doc
        for k in schema["$ref"][2:].split("/"):
            node = node[k]
        schema = node
    errs = []
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        if not any(type_ok(value, t) for t in types):
            return [f"{where}: {json.dumps(value)[:80]} is not {'/'.join(types)}"]
    if "const" in schema and value != schema["const"]:
        errs.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "oneOf" in schema:
        n = sum(1 for s in schema["oneOf"] if not conforms(doc, value, s, where))
        if n != 1:
            errs.append(f"{where}: matches {n} of oneOf")
    if schema.get("format") == "date-time" and isinstance(value, str) and \
            not RFC3339.match(value):
        errs.append(f"{where}: {value!r} is not RFC 3339")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{where}: {value} > {schema['maximum']}")
    if isinstance(value, dict):
        errs += [f"{where}: no {k}" for k in schema.get("required", []) if k not in value]
        for k, s in schema.get("properties", {}).items():
            if k in value:
                errs += conforms(doc, value[k], s, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errs += conforms(doc, v, schema["items"], f"{where}[{i}]")
    return errs


def type_ok(v, t):
    return {"null": v is None, "boolean": isinstance(v, bool),
            "integer": isinstance(v, int) and not isinstance(v, bool),
            "number": isinstance(v, (int, float)) and not isinstance(v, bool),
            "string": isinstance(v, str), "array": isinstance(v, list),
            "object": isinstance(v, dict)}[t]


def run_with_servers(prefix, body, check, failures):
    """A test's whole life with the servers it starts itself: a fresh scratch dir (o+x, so the
    VMs' jail reaches the runtime dirs in it), @body(tmp, servers) run (it appends each Server
    it makes to servers; an exception propagates after the clean-up), then each server still
    running stopped, @check(cond, what, detail) that none of its processes is left, each one's
    log printed if @failures (the test's list of failed checks) is not empty, and the scratch
    dir removed."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o711)
    servers = []
    try:
        body(tmp, servers)
    finally:
        for srv in servers:
            if srv.proc is not None and srv.proc.poll() is None:
                srv.stop()
            left = srv.leftovers(timeout=10)
            check(left == [], f"{srv.name}: no process left", left)
            if failures:
                print(f"-- {srv.name}'s log:\n{srv.log()}")
        shutil.rmtree(tmp, ignore_errors=True)


def run_with_server(sandbox, prefix, tenants, body, pool=1, catalogs=None):
    """A test's whole life with one `sandbox serve --listen`: a fresh scratch dir (o+x, so the
    VMs' jail reaches the runtime dirs in it), the tenants of @tenants (a list of (name,
    options...), their keys in order), @catalogs(tmp) for its catalogs dir (or None), the server
    started, @body(srv, keys, tmp) run (None, or why it failed; an exception propagates after the
    clean-up), the server stopped and none of its processes left. Prints PASS or FAIL: why and
    the server's log; returns the exit status (0 or 1)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o711)
    srv = None
    failure = None
    try:
        db = os.path.join(tmp, "state", "sandbox.db")
        keys = [tenant(sandbox, db, "add", *t) for t in tenants]
        srv = Server(sandbox, tmp, db, pool=pool,
                     catalogs_dir=catalogs(tmp) if catalogs else None)
        failure = srv.start() or body(srv, keys, tmp)
    finally:
        if srv is not None:
            rc = srv.stop()
            left = srv.leftovers()
            if rc != 0 and failure is None:
                failure = f"sandbox serve exited {rc} on SIGTERM"
            if left and failure is None:
                failure = f"left running after the server stopped: {left}"
            if failure is not None:
                print(srv.log())
        shutil.rmtree(tmp, ignore_errors=True)
    if failure:
        print(f"FAIL: {failure}")
        return 1
    print("PASS")
    return 0

