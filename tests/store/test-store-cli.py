#!/usr/bin/env python3
"""`sandbox tenant` and `sandbox records` on a temporary database: the key printed once and
working as stored (its hash), list/remove/rotate-key, quotas (the session ones too) and set,
usage errors (2), refusals (1), and records list/show/prune/sessions/session/export (rows written with
Python's sqlite3, as the server would); prune by bytes (--max-mib) and serve's retention options'
usage errors (no VM: refused before anything starts). Usage: test-store-cli.py SANDBOX_BINARY"""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

SANDBOX = sys.argv[1]
failures = []


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([SANDBOX, *args], capture_output=True, env=e, timeout=30)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def expect(args, rc, text=None, **kw):
    got_rc, out, err = run(*args, **kw)
    if got_rc != rc or (text is not None and text not in out + err):
        failures.append(f"sandbox {' '.join(args)}: rc {got_rc} (want {rc}), "
                        f"wanted {text!r} in:\n{out}{err}")
    return out


def key_hash(db, name):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT key_hash FROM tenants WHERE name = ?", (name,)).fetchone()[0]


with tempfile.TemporaryDirectory(prefix="sbx-store-cli-") as tmp:
    db = os.path.join(tmp, "state", "sandbox.db")
    d = ["--db", db]

    expect(["tenant"], 2, "Usage: sandbox tenant")
    expect(["tenant", "frob"], 2, "unknown subcommand")
    expect(["tenant", "add", *d], 2, "expected one NAME")
    expect(["tenant", "add", "bad name", *d], 2, "tenant name")
    expect(["tenant", "add", "x", "--max-concurrent", "0", *d], 2, "--max-concurrent")
    expect(["tenant", "add", "x", "--max-output", "2G", *d], 2, "--max-output")
    expect(["tenant", "add", "x", "--max-timeout", "abc", *d], 2, "--max-timeout")
    expect(["tenant", "add", "x", "--max-sessions", "0", *d], 2, "--max-sessions: expected 1 to 64")
    expect(["tenant", "add", "x", "--max-sessions", "65", *d], 2, "--max-sessions")
    expect(["tenant", "add", "x", "--max-session-memory", "1048577", *d], 2,
           "--max-session-memory: expected 1 to 1048576")
    expect(["tenant", "add", "x", "--max-session-memory", "1G", *d], 2, "--max-session-memory")
    expect(["tenant", "list", "extra", *d], 2, "no argument")

    rc, key, err = run("tenant", "add", "alice", "--max-concurrent", "3", "--per-minute", "30",
                       "--max-timeout", "60", "--max-output", "1M", "--max-sessions", "4",
                       "--catalog", "web", "--catalog", "db", *d)
    key = key.strip()
    if rc != 0 or not key.startswith("sbx_") or len(key) != 47 or "not shown again" not in err:
        failures.append(f"tenant add: rc {rc} key {key!r} err {err!r}")
    if os.stat(db).st_mode & 0o777 != 0o600 or os.stat(os.path.dirname(db)).st_mode & 0o777 != 0o700:
        failures.append("database file or folder mode is not 0600/0700")
    if key_hash(db, "alice") != hashlib.sha256(key.encode()).hexdigest():
        failures.append("the stored hash is not the key's SHA-256")
    expect(["tenant", "add", "alice", *d], 1, "exists")

    out = expect(["tenant", "list", *d], 0, "alice")
    if key[:10] not in out or key[10:] in out:
        failures.append(f"tenant list shows not just the key's start:\n{out}")
    tenants = json.loads(expect(["tenant", "list", "--json", *d], 0))
    t = tenants[0]
    if (t["name"] != "alice" or t["quotas"] != {"max_concurrent": 3, "max_per_minute": 30,
                                                 "max_timeout_ms": 60000,
                                                 "max_output_bytes": 1048576,
                                                 "max_sessions": 4,
                                                 "max_session_memory_mib": 1024}
            or t["catalogs"] != ["db", "web"]):
        failures.append(f"tenant list --json: {t}")
    if "\t4\t1024 MiB\t" not in out or "SESSIONS\tSESSION MEMORY" not in out:
        failures.append(f"tenant list: no session quotas:\n{out}")

    # set: the quotas given change, the others stay; the key still works (same hash).
    hash_before = key_hash(db, "alice")
    expect(["tenant", "set", "alice", *d], 2, "expected a quota to set")
    expect(["tenant", "set", *d], 2, "expected one NAME")
    expect(["tenant", "set", "alice", "--max-sessions", "99", *d], 2, "--max-sessions")
    expect(["tenant", "set", "alice", "--catalog", "x", *d], 2, "--catalog")
    expect(["tenant", "set", "nobody", "--max-sessions", "1", *d], 1, "no tenant")
    expect(["tenant", "set", "alice", "--max-sessions", "8", "--max-session-memory", "4096",
            "--per-minute", "90", *d], 0, "set")
    t = json.loads(expect(["tenant", "list", "--json", *d], 0))[0]
    if t["quotas"] != {"max_concurrent": 3, "max_per_minute": 90, "max_timeout_ms": 60000,
                       "max_output_bytes": 1048576, "max_sessions": 8,
                       "max_session_memory_mib": 4096} or t["catalogs"] != ["db", "web"]:
        failures.append(f"tenant set: {t}")
    if key_hash(db, "alice") != hash_before:
        failures.append("tenant set changed the key")

    rc, new_key, _ = run("tenant", "rotate-key", "alice", *d)
    new_key = new_key.strip()
    if rc != 0 or new_key == key or key_hash(db, "alice") != hashlib.sha256(new_key.encode()).hexdigest():
        failures.append(f"rotate-key: rc {rc}, key {new_key!r}")
    expect(["tenant", "rotate-key", "nobody", *d], 1, "no tenant")

    # Records, as a server writes them.
    with sqlite3.connect(db) as c:
        for i, (status, tenant) in enumerate([("ok", t["id"]), ("error", None),
                                              ("running", t["id"])]):
            c.execute("INSERT INTO executions (id, tenant_id, front_end, language, code,"
                      " code_sha256, timeout_ms, output_limit, status, exit_code, created_at,"
                      " stdout, result_json) VALUES (?, ?, 'serve', 'python', ?, ?, 1000, 100, ?,"
                      " ?, ?, ?, ?)",
                      (f"x{i}", tenant, f"print({i})", "0" * 64, status, i, 1000 + i,
                       b"out\x1b[2J\xff", "{\"v\":1}"))
        c.execute("INSERT INTO tool_calls (execution_id, seq, call_id, provider, tool, input_json,"
                  " ok, duration_ms) VALUES ('x0', 0, 1, 'web', 'get', '{\"u\":1}', 1, 5)")
    out = expect(["records", "list", *d], 0, "x2")
    if out.index("x2") > out.index("x1") or out.index("x1") > out.index("x0"):
        failures.append(f"records list is not newest first:\n{out}")
    rows = json.loads(expect(["records", "list", "--json", "--tenant", "alice", *d], 0))
    if [r["id"] for r in rows] != ["x2", "x0"]:
        failures.append(f"records list --tenant alice: {rows}")
    rows = json.loads(expect(["records", "list", "--json", "--status", "error", *d], 0))
    if [r["id"] for r in rows] != ["x1"]:
        failures.append(f"records list --status error: {rows}")
    rows = json.loads(expect(["records", "list", "--json", "--limit", "1", *d], 0))
    if len(rows) != 1:
        failures.append(f"records list --limit 1: {rows}")
    expect(["records", "list", "--limit", "100000", *d], 2, "--limit")
    expect(["records", "list", "--tenant", "nobody", *d], 1, "no tenant")
    out = expect(["records", "show", "x0", *d], 0, "print(0)")
    if "\x1b" in out or "web.get" not in out:
        failures.append(f"records show: control bytes or no tool call:\n{out!r}")
    rec = json.loads(expect(["records", "show", "x0", "--json", *d], 0))
    if rec["result"] != {"v": 1} or rec["tool_calls"][0]["input"] != {"u": 1} or \
            rec["stdout"] != "out\x1b[2J\ufffd":
        failures.append(f"records show --json: {rec}")
    expect(["records", "show", "nope", *d], 1, "no record")
    expect(["records", "show", *d], 2, "one ID")
    expect(["records", "frob", *d], 2, "unknown subcommand")
    bundle = os.path.join(tmp, "x.bundle")
    expect(["records", "export", "nope", *d], 2, "an ID and a FILE")
    expect(["records", "export", "nope", bundle, *d], 1, "no record")
    if os.path.exists(bundle):
        failures.append("records export of no record left a file")

    expect(["tenant", "remove", "alice", *d], 0, "removed")
    expect(["tenant", "remove", "alice", *d], 1, "no tenant")
    # The records of a removed tenant stay, found by its id.
    rows = json.loads(expect(["records", "list", "--json", "--tenant", t["id"], *d], 0))
    if [r["id"] for r in rows] != ["x2", "x0"]:
        failures.append(f"records of a removed tenant: {rows}")
    out = expect(["tenant", "list", *d], 0)
    if out.strip():
        failures.append(f"tenant list after remove: {out!r}")

    # Retention: finished records by count, then by age; running ones stay; calls go with theirs.
    expect(["records", "prune", *d], 2, "--max-age-days")
    expect(["records", "prune", "--max-age-days", "-1", *d], 2, "--max-age-days")
    expect(["records", "prune", "--max-count", "1", *d], 0, "1 record and 0 sessions deleted")
    rows = json.loads(expect(["records", "list", "--json", *d], 0))
    if [r["id"] for r in rows] != ["x2", "x1"]:
        failures.append(f"records prune --max-count 1: {[r['id'] for r in rows]}")
    with sqlite3.connect(db) as c:
        if c.execute("SELECT count(*) FROM tool_calls").fetchone()[0] != 0:
            failures.append("records prune: the pruned record's tool calls stayed")
    expect(["records", "prune", "--max-age-days", "1", *d], 0, "1 record and 0 sessions deleted")
    rows = json.loads(expect(["records", "list", "--json", *d], 0))
    if [r["id"] for r in rows] != ["x2"]:
        failures.append(f"records prune --max-age-days 1: {[r['id'] for r in rows]}")

    # Retention by bytes, in a store of its own: records of 600 KiB each (size_bytes, as the
    # server computes it at the finish), the oldest first; --max-mib 2 keeps the newest three
    # (1800 KiB) and deletes only the oldest; the running one never goes and counts for nothing.
    db3 = os.path.join(tmp, "bytes", "sandbox.db")
    d3 = ["--db", db3]
    expect(["records", "list", *d3], 0)  # makes the store
    with sqlite3.connect(db3) as c:
        for xid, status, created in [("b-run", "running", 900), ("b0", "ok", 1000),
                                     ("b1", "error", 1001), ("b2", "ok", 1002), ("b3", "ok", 1003)]:
            c.execute("INSERT INTO executions (id, front_end, language, code, code_sha256,"
                      " timeout_ms, output_limit, status, created_at, size_bytes)"
                      " VALUES (?, 'serve', 'python', '1', ?, 1000, 100, ?, ?, ?)",
                      (xid, "0" * 64, status, created, 600 * 1024))
    expect(["records", "prune", "--max-mib", "-1", *d3], 2, "--max-mib")
    expect(["records", "prune", "--max-mib", str(2**30 + 1), *d3], 2, "--max-mib")
    expect(["records", "prune", "--max-mib", "0", *d3], 2, "--max-mib")  # 0 alone: no bound
    expect(["records", "prune", "--max-mib", "3", *d3], 0, "0 records and 0 sessions deleted")
    expect(["records", "prune", "--max-mib", "2", *d3], 0, "1 record and 0 sessions deleted")
    rows = json.loads(expect(["records", "list", "--json", *d3], 0))
    if [r["id"] for r in rows] != ["b3", "b2", "b1", "b-run"]:
        failures.append(f"records prune --max-mib 2: {[r['id'] for r in rows]}")
    expect(["records", "prune", "--max-mib", "1", "--max-count", "3", *d3], 0,
           "2 records and 0 sessions deleted")
    rows = json.loads(expect(["records", "list", "--json", *d3], 0))
    if [r["id"] for r in rows] != ["b3", "b-run"]:
        failures.append(f"records prune --max-mib 1 --max-count 3: {[r['id'] for r in rows]}")
    out = expect(["records", "prune", "--help", *d3], 0, "--max-mib")

    # serve's retention options: values out of range are usage errors (2) before anything
    # starts (no socket's folder made); --help names --keep-mib.
    sock = os.path.join(tmp, "serve-usage", "sandbox.sock")
    serve_db = os.path.join(tmp, "serve-usage", "sandbox.db")
    for args in (["--keep-mib", "-1"], ["--keep-mib", str(2**30 + 1)], ["--keep-mib", "x"],
                 ["--keep-days", "-1"], ["--keep-days", "36501"], ["--keep-records", "-1"]):
        rc, out, err = run("serve", "--socket", sock, "--db", serve_db, *args)
        if rc != 2 or args[0] not in err or os.path.exists(os.path.dirname(sock)):
            failures.append(f"serve {' '.join(args)}: rc {rc} (want 2): {err!r}")
    expect(["serve", "--help"], 0, "--keep-mib")

    # Sessions, as a server writes them, in a store of their own (the counts above stay).
    db2 = os.path.join(tmp, "sessions", "sandbox.db")
    d2 = ["--db", db2]
    out = expect(["records", "sessions", *d2], 0)
    if out.strip():
        failures.append(f"records sessions of an empty store: {out!r}")
    with sqlite3.connect(db2) as c:
        for sid, tenant, status, created, ended, reason in [
                ("sA", "t_00000000000000aa", "open", 3000, None, None),
                ("sB", None, "expired", 2000, 2500, "idle 600 s\x1b[2J"),
                ("sC", None, "ended", 1000, 1100, None)]:
            c.execute("INSERT INTO sessions (id, tenant_id, profile, memory_mib, created_at,"
                      " idle_timeout_ms, max_lifetime_ms, status, reason, ended_at)"
                      " VALUES (?, ?, 'q35-serial', 256, ?, 600000, 3600000, ?, ?, ?)",
                      (sid, tenant, created, status, reason, ended))
        for xid, sid, status, created in [("e1", "sB", "ok", 2100), ("e2", "sB", "error", 2200),
                                          ("e3", "sA", "running", 3100), ("e4", None, "ok", 1500)]:
            c.execute("INSERT INTO executions (id, session_id, front_end, language, code,"
                      " code_sha256, timeout_ms, output_limit, status, created_at)"
                      " VALUES (?, ?, 'http', 'python', '1', ?, 1000, 100, ?, ?)",
                      (xid, sid, "0" * 64, status, created))
    rows = json.loads(expect(["records", "sessions", "--json", *d2], 0))
    if [(r["id"], r["executions"]) for r in rows] != [("sA", 1), ("sB", 2), ("sC", 0)]:
        failures.append(f"records sessions --json: {rows}")
    out = expect(["records", "sessions", *d2], 0, "EXECUTIONS")
    if "\x1b" in out or out.index("sA") > out.index("sB") or "q35-serial" not in out:
        failures.append(f"records sessions: {out!r}")
    rows = json.loads(expect(["records", "sessions", "--json", "--tenant", "t_00000000000000aa",
                              *d2], 0))
    if [r["id"] for r in rows] != ["sA"]:
        failures.append(f"records sessions --tenant: {rows}")
    rows = json.loads(expect(["records", "sessions", "--json", "--status", "expired", *d2], 0))
    if [r["id"] for r in rows] != ["sB"] or rows[0]["reason"] != "idle 600 s\x1b[2J":
        failures.append(f"records sessions --status expired: {rows}")
    rows = json.loads(expect(["records", "sessions", "--json", "--limit", "1", *d2], 0))
    if [r["id"] for r in rows] != ["sA"]:
        failures.append(f"records sessions --limit 1: {rows}")
    expect(["records", "sessions", "--limit", "100000", *d2], 2, "--limit")
    expect(["records", "sessions", "extra", *d2], 2, "no argument")
    expect(["records", "sessions", "--session", "sA", *d2], 2, "--session")
    out = expect(["records", "session", "sB", *d2], 0, "idle 600 s")
    if ("\x1b" in out or "--- executions" not in out or out.index("e1") > out.index("e2")
            or "expired" not in out or "256 MiB" not in out or "600 s" not in out):
        failures.append(f"records session sB: {out!r}")
    doc = json.loads(expect(["records", "session", "sB", "--json", *d2], 0))
    if (doc["session"]["id"] != "sB" or doc["session"]["executions"] != 2
            or [e["id"] for e in doc["executions"]] != ["e1", "e2"]
            or {e["session_id"] for e in doc["executions"]} != {"sB"}):
        failures.append(f"records session sB --json: {doc}")
    doc = json.loads(expect(["records", "session", "sC", "--json", *d2], 0))
    if doc["executions"] != [] or doc["session"]["status"] != "ended":
        failures.append(f"records session sC --json: {doc}")
    expect(["records", "session", "nope", *d2], 1, "no session")
    expect(["records", "session", *d2], 2, "one ID")
    rows = json.loads(expect(["records", "list", "--json", "--session", "sB", *d2], 0))
    if [r["id"] for r in rows] != ["e2", "e1"]:
        failures.append(f"records list --session sB: {rows}")
    expect(["records", "show", "e1", *d2], 0, "sB")
    expect(["records", "show", "e4", *d2], 0, "session:")
    # Retention: finished executions by age, then the ended sessions none names any more; the
    # open one stays, with its running execution.
    expect(["records", "prune", "--max-age-days", "1", *d2], 0, "3 records and 2 sessions deleted")
    rows = json.loads(expect(["records", "sessions", "--json", *d2], 0))
    if [(r["id"], r["status"], r["executions"]) for r in rows] != [("sA", "open", 1)]:
        failures.append(f"records sessions after prune: {rows}")

    # The default path: $SANDBOX_STATE_DIR.
    state = os.path.join(tmp, "default-state")
    expect(["tenant", "list"], 0, env={"SANDBOX_STATE_DIR": state})
    if not os.path.exists(os.path.join(state, "sandbox.db")):
        failures.append("SANDBOX_STATE_DIR: no sandbox.db made there")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
