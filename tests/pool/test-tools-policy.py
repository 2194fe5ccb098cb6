#!/usr/bin/env python3
"""Tool providers and the tool policy with real VMs (docs/tools.md). Usage:
test-tools-policy.py SANDBOX_BINARY

Starts a JSON API on 127.0.0.1 (http-test-server.py, which requires a secret bearer token) and
`sandbox serve --pool 1` on a private socket (the token in serve's environment only), then
runs guest programs through it:
  JS:     an http tool (URL template, query, the secret header checked by the server), a POST
          body, a 404 (tool_error with status and body), a non-JSON answer, a denied tool
          (PolicyDenied / policy_denied), the command provider, and a call that needs an
          approval, granted with `sandbox approve ID` while the program goes on calling tools;
  Python: a denied tool (PolicyDenied), an approval that times out (policy_denied);
  direct: `sandbox run --no-serve` without a terminal denies an approval-required call at
          once, saying how; on a pseudo-terminal it asks there, and `y` approves.
The token must appear nowhere the guest or the record can see: not in stdout, not in the
--json report, not in `sandbox tools --types`. Every process started is tracked by PID and
ended by it. Exit 77 when the guest image or the bridge is not built."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
HERE = os.path.dirname(os.path.abspath(__file__))
CALC = os.path.join(os.path.dirname(HERE), "integration", "calc-tool")
TOKEN = "tok-" + os.urandom(8).hex()
failures = []
checks = [0]


def check(cond, what, detail=""):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[:3000], flush=True)


def catalog(port, timeout_ms):
    base = f"http://127.0.0.1:{port}"
    return {
        "providers": {
            "api": {
                "kind": "http",
                "timeout_ms": 20000,
                "headers": {"Authorization": "Bearer ${secret:TEST_API_TOKEN}"},
                "tools": {
                    "get_repo": {"description": "A repository.",
                                 "url": base + "/repos/{owner}/{repo}"},
                    "create": {"method": "POST", "url": base + "/items/{id}"},
                    "missing": {"url": base + "/missing"},
                    "text": {"url": base + "/text"},
                    "delete_repo": {"method": "DELETE", "url": base + "/repos/{owner}"},
                    "guarded": {"url": base + "/guarded"},
                },
            },
            "calc": {"kind": "command", "command": [CALC], "tools": {"add": {}}},
        },
        "policy": {
            "rules": [
                {"match": "*.delete_*", "action": "deny"},
                {"match": "api.guarded", "action": "approve"},
                {"match": "api.*", "action": "allow"},
            ],
            "approval_timeout_ms": timeout_ms,
        },
    }


def sandbox(env, *args, **kw):
    # A session of its own: no controlling terminal, so a direct run never prompts.
    return subprocess.run([SANDBOX, *args], capture_output=True, env=env, timeout=240,
                          start_new_session=True, **kw)


def ask(sock_path, message):
    """One raw client message to serve and its answer (the approval messages, docs/pool.md)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(sock_path)
        m = json.dumps(message).encode()
        s.sendall(struct.pack(">I", len(m)) + m)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            buf += chunk
        return json.loads(buf[4:4 + struct.unpack(">I", buf[:4])[0]])


def hostile_approvals(sock_path):
    """Bad approval messages get an error, never a crash; the server answers afterwards."""
    for msg, code in [({"type": "approve"}, "bad_request"),
                      ({"type": "deny", "id": 5}, "bad_request"),
                      ({"type": "approve", "id": "x" * 100}, "bad_request"),
                      ({"type": "deny", "id": "424242"}, "not_found")]:
        r = ask(sock_path, msg)
        check(r.get("type") == "error" and r.get("code") == code, f"{msg}: {code}", r)
    r = ask(sock_path, {"type": "approvals"})
    check(r == {"type": "approvals", "pending": []}, "an empty approvals list", r)


def direct_with_prompt(env, cat_path, tmp):
    """A direct run on a pseudo-terminal: the approval is asked there and answered `y`."""
    import pty
    import select
    prog = os.path.join(tmp, "prompted.py")
    with open(prog, "w") as f:
        f.write("print(tools.calc.add({'a': 1, 'b': 1}), tools.api.guarded({'p': 1}))\n")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(SANDBOX, [SANDBOX, "run", "--no-serve", "--json", "--tools", cat_path, prog],
                      env)
        finally:
            os._exit(127)
    buf, answered, end = b"", False, time.monotonic() + 240
    try:
        while time.monotonic() < end:
            if not select.select([fd], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break  # EIO: the child closed the terminal (it exited)
            if not chunk:
                break
            buf += chunk
            if not answered and b"approve it? [y/N]" in buf:
                check(b"api.guarded wants to run with {\"p\":1}" in buf,
                      "the prompt names the call", buf)
                os.write(fd, b"y\n")
                answered = True
    finally:
        if time.monotonic() >= end:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    check(answered, "a direct run on a terminal asks for the approval", buf[-2000:])
    text = buf.decode(errors="replace")
    start = text.find('{"start"')
    rep = json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else {}
    check(rep.get("status") == "ok" and "{'guarded': True}" in rep.get("stdout", ""),
          "the call approved on the terminal ran", text[-3000:])
    pol = rep["tool_calls"][-1].get("policy", {}) if rep.get("tool_calls") else {}
    check(pol.get("approval") == "approved", "the record has the terminal's approval", pol)


JS = r"""
const out = {};
out.repo = await tools.api.get_repo({owner: "me/you", repo: "r 1", q: "a&b", n: [1, 2]});
out.created = await tools.api.create({id: 7, name: "x", tags: {a: 1}});
for (const t of ["missing", "text", "delete_repo"]) {
  try { await tools.api[t]({owner: "o"}); out[t] = "no error"; }
  catch (e) { out[t] = {name: e.name, code: e.code, message: e.message}; }
}
out.sum = await tools.calc.add({a: 2, b: 3});
let settled = null;
const guarded = tools.api.guarded({why: "test"})
  .then(v => settled = {ok: v}, e => settled = {err: e.code});
let during = 0;
const start = Date.now();
while (settled === null && Date.now() - start < 60000) {
  await tools.calc.add({a: during, b: 1});
  during++;
}
await guarded;
out.guarded = settled;
out.calls_while_waiting = during;
console.log(JSON.stringify(out));
"""

PY = r"""
import json
out = {}
try:
    tools.api.delete_repo({"owner": "o"})
    out["denied"] = "no error"
except PolicyDenied as e:
    out["denied"] = {"code": e.code, "message": str(e)}
try:
    tools.api.guarded({})
    out["late"] = "no error"
except PolicyDenied as e:
    out["late"] = {"code": e.code, "message": str(e)}
print(json.dumps(out))
"""


def run_js_with_approval(env, cat_path):
    proc = subprocess.Popen([SANDBOX, "run", "--json", "--lang", "javascript", "--tools",
                             cat_path, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdin.write(JS.encode())
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it
    approved = None
    try:
        end = time.monotonic() + 180
        while approved is None and time.monotonic() < end and proc.poll() is None:
            r = sandbox(env, "approvals", "--json")
            pending = json.loads(r.stdout) if r.returncode == 0 else []
            mine = [a for a in pending if a["provider"] == "api" and a["tool"] == "guarded"]
            if mine:
                check(mine[0]["input"] == {"why": "test"}, "the approval lists the input", mine)
                check(mine[0].get("origin") == f"sandbox run, pid {proc.pid}",
                      "the approval names the client that runs the program", mine)
                time.sleep(1)  # let the program make calls while the approval waits
                r = sandbox(env, "approve", mine[0]["id"])
                check(r.returncode == 0, "sandbox approve ID exits 0", r.stderr)
                approved = mine[0]["id"]
                r = sandbox(env, "approve", approved)
                check(r.returncode == 1 and b"no pending approval" in r.stderr,
                      "approving twice: not found, exit 1", r)
            time.sleep(0.2)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(approved is not None, "the approval showed up in `sandbox approvals`")
    return json.loads(out), err.decode(errors="replace")


def check_js(rep):
    check(rep["status"] == "ok", "the JS run succeeds", rep)
    out = json.loads(rep["stdout"])
    check(out["repo"] == {"path": "/repos/me%2Fyou/r%201?q=a%26b&n=1&n=2", "auth_ok": True},
          "URL template, query and secret header", out.get("repo"))
    check(out["created"] == {"path": "/items/7", "body": {"name": "x", "tags": {"a": 1}}},
          "POST: the rest of the input as the JSON body", out.get("created"))
    check(out["missing"]["code"] == "tool_error" and "HTTP 404" in out["missing"]["message"]
          and "no such thing" in out["missing"]["message"], "404: tool_error with status, body",
          out.get("missing"))
    check(out["text"]["code"] == "tool_error" and "not JSON" in out["text"]["message"],
          "non-JSON answer: tool_error", out.get("text"))
    check(out["delete_repo"]["name"] == "PolicyDenied" and
          out["delete_repo"]["code"] == "policy_denied", "denied in JS", out.get("delete_repo"))
    check(out["sum"] == {"result": 5}, "the command provider", out.get("sum"))
    check(out["guarded"] == {"ok": {"guarded": True}}, "the approved call ran", out)
    check(out["calls_while_waiting"] >= 1, "other calls went on while the approval waited", out)
    calls = {c["tool"]: c for c in rep["tool_calls"]}
    pol = calls["guarded"].get("policy", {})
    check(pol.get("action") == "approve" and pol.get("approval") == "approved" and
          pol.get("rule") == "api.guarded", "the record has the approval", pol)
    check(calls["delete_repo"].get("policy") == {"action": "deny", "rule": "*.delete_*"},
          "the record has the denial", calls["delete_repo"])
    check(calls["get_repo"].get("policy", {}).get("action") == "allow", "allow recorded")


def check_py(rep):
    check(rep["status"] == "ok", "the Python run succeeds", rep)
    out = json.loads(rep["stdout"])
    check(out["denied"]["code"] == "policy_denied", "denied in Python", out)
    check(out["late"]["code"] == "policy_denied" and "no approval within" in
          out["late"]["message"], "an approval that times out is denied", out)
    late = [c for c in rep["tool_calls"] if c["tool"] == "guarded"][0]
    check(late["policy"].get("approval") == "timed_out", "the record says timed_out", late)


def body(env, direct_env, tmp, port):
    cat_a = os.path.join(tmp, "a.json")
    cat_b = os.path.join(tmp, "b.json")
    with open(cat_a, "w") as f:
        json.dump(catalog(port, 120000), f)
    with open(cat_b, "w") as f:
        json.dump(catalog(port, 1500), f)
    rep, err = run_js_with_approval(env, cat_a)
    check_js(rep)
    everything = json.dumps(rep) + err
    check(TOKEN not in everything, "the secret is not in the guest's output or the record")
    r = sandbox(env, "run", "--json", "--lang", "python", "--tools", cat_b, "-", input=PY.encode())
    rep = json.loads(r.stdout)
    check_py(rep)
    check(TOKEN.encode() not in r.stdout + r.stderr, "no secret in the Python run's report")
    r = sandbox(direct_env, "run", "--no-serve", "--json", "--lang", "python", "--tools", cat_b,
                "-", input=b"try:\n  tools.api.guarded({})\nexcept PolicyDenied as e:\n"
                            b"  print(e.code, e)\n")
    rep = json.loads(r.stdout)
    check(rep["status"] == "ok" and rep["stdout"].startswith("policy_denied") and
          "sandbox serve" in rep["stdout"], "a direct run denies approvals at once, says how", rep)
    direct_with_prompt(direct_env, cat_a, tmp)
    hostile_approvals(env["SANDBOX_SERVE_SOCKET"])
    r = sandbox(env, "tools", "--types", "ts", "--tools", cat_a)
    check(r.returncode == 0 and TOKEN.encode() not in r.stdout, "no secret in the namespace",
          r.stderr.decode(errors="replace"))


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")) or \
            not os.path.exists(os.environ.get("SANDBOX_BRIDGE", BUILD + "/bridge/sandbox-bridge")):
        print("skipped: the guest image or the bridge is not built")
        return 77
    with tempfile.TemporaryDirectory(prefix="sbx-policy-") as tmp:
        api = subprocess.Popen([sys.executable, os.path.join(HERE, "http-test-server.py"), TOKEN],
                               stdout=subprocess.PIPE)
        serve = None
        try:
            port = int(api.stdout.readline())
            sock = os.path.join(tmp, "s", "sandbox.sock")
            rt = os.path.join(tmp, "rt")
            os.mkdir(rt, 0o700)
            env = dict(os.environ, SANDBOX_SERVE_SOCKET=sock, XDG_RUNTIME_DIR=rt,
                       SANDBOX_STATE_DIR=os.path.join(tmp, "state"),
                       SANDBOX_SECRETS_FILE=os.path.join(tmp, "no-secrets"))
            serve_env = dict(env, SANDBOX_SECRET_TEST_API_TOKEN=TOKEN)
            direct = dict(serve_env)  # a direct run loads the providers (and the secret) itself
            log = open(os.path.join(tmp, "serve.log"), "w+")
            serve = subprocess.Popen([SANDBOX, "serve", "--socket", sock, "--pool", "1"],
                                     env=serve_env, stdout=log, stderr=log)
            end = time.monotonic() + 180
            while time.monotonic() < end and serve.poll() is None and \
                    sandbox(env, "approvals").returncode != 0:
                time.sleep(0.2)
            body(env, direct, tmp, port)
            serve.send_signal(signal.SIGTERM)
            check(serve.wait(timeout=60) == 0, "serve exits 0 on SIGTERM")
            check(os.listdir(rt) == [], "nothing left in the runtime dir (no dconf either)",
                  os.listdir(rt))
            if failures:
                log.seek(0)
                print("serve's log:\n" + log.read()[-5000:])
        finally:
            for p in (serve, api):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
