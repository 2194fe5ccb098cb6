#!/usr/bin/env python3
"""The HTTP API of `sandbox serve --listen` with real VMs (docs/api.md). Usage:
test-http-api.py SANDBOX_BINARY

Makes tenants in a temp store, starts serve on 127.0.0.1 (a free port) with a catalogs dir
holding a catalog whose tool needs an approval, and checks with python3-requests, raw sockets
and curl: health and the OpenAPI document without a key (valid, and the file in the tree);
401s; runs in every language, function calls (entry, args), ?wait, lists and cursors; SSE
and NDJSON streams; cancel and 409; every kind of malformed request; tenant isolation (404);
quotas (429 + Retry-After);
fairness between a flooding tenant and another (SBX_TEST_FLOOD executions, default 100); an
approval answered over the API; the header timeout (slowloris), big headers and bodies, many
connections; README's Python client (docs/examples/api-client.py); HTTPS with --tls-cert and
--tls-key (a second server, openssl's self-signed certificate); kill -9 of the server
mid-execution (restart on the same store: `interrupted`, what ended before read back from its
record, no QEMU left); SIGTERM leaves nothing. A check the server cannot do fails. Exit 77 only when
the guest image or the bridge is not built."""
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime, timedelta, timezone

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api  # noqa: E402

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
CALC = os.path.join(api.TOP, "tests", "integration", "calc-tool")
FLOOD = int(os.environ.get("SBX_TEST_FLOOD", "100"))
BODY_MAX = (7 << 20) + (64 << 10)  # docs/api.md, "Limits"
DOC = api.load_openapi()
failures = []
checks = [0]


def check(cond, what, detail=""):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[:2000], flush=True)
    return cond


def err_is(r, status, code, what):
    """@r is an error answer @status with code @code (and the Error schema)."""
    body = r.json() if api.is_json(r) else None
    ok = r.status_code == status and isinstance(body, dict) and \
        body.get("error", {}).get("code") == code and \
        not api.conforms(DOC, body, {"$ref": "#/components/schemas/Error"})
    return check(ok, f"{what}: {status} {code}",
                 f"got {r.status_code} {r.headers.get('Content-Type')} {r.text[:500]!r}")


def is_execution(obj, what, summary=False):
    schema = "ExecutionSummary" if summary else "Execution"
    errs = api.conforms(DOC, obj, {"$ref": "#/components/schemas/" + schema})
    return check(not errs, f"{what}: a {schema} object", (errs, obj))


def ts(text):
    """An RFC 3339 time as a datetime (to compare times, not strings)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def section(fn, *args):
    """Run one group of checks; an exception is a failure of the group, the rest go on."""
    print(f"-- {fn.__name__}", flush=True)
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - reported as a failure, not swallowed
        # The innermost frames are cut last (check() keeps 2000 characters): ours first.
        ours = [f for f in traceback.extract_tb(e.__traceback__) if "site-packages" not in
                f.filename and "/lib/python3" not in f.filename]
        check(False, f"{fn.__name__} raised {type(e).__name__}: {e}",
              "".join(traceback.format_list(ours)))


def public(srv):
    r = srv.request("GET", "/v1/health")
    check(r.status_code == 200 and api.is_json(r) and r.json() == {"status": "ok"},
          "GET /v1/health without a key: 200 {\"status\":\"ok\"}", (r.status_code, r.text[:300]))
    r = srv.request("GET", "/v1/openapi.json")
    check(r.status_code == 200 and api.is_json(r), "GET /v1/openapi.json without a key: 200 JSON",
          (r.status_code, r.headers.get("Content-Type")))
    check(r.status_code == 200 and r.json() == DOC,
          "the served OpenAPI document is host-agent/server/openapi.json")
    p = subprocess.run(["node", api.VALIDATE, "-"], input=r.content, capture_output=True,
                       timeout=60)
    check(p.returncode == 0, "the served OpenAPI document is valid OpenAPI 3.1", p.stderr)


def unauthorized(srv, keys):
    paths = [("GET", "/v1/executions"), ("POST", "/v1/executions"), ("GET", "/v1/approvals"),
             ("GET", "/v1/executions/ex_0000"), ("POST", "/v1/executions/ex_0000/cancel"),
             ("GET", "/v1/executions/ex_0000/events"), ("POST", "/v1/approvals/1")]
    body = {"language": "javascript", "code": "1"}
    for method, path in paths:
        for what, auth in [("no header", None), ("Basic", "Basic " + keys["a"]),
                           ("an unknown key", "Bearer sbx_" + "A" * 43),
                           ("an empty Bearer", "Bearer "),
                           ("a removed tenant's key", "Bearer " + keys["removed"]),
                           ("a rotated-away key", "Bearer " + keys["rotated_old"])]:
            h = {"Authorization": auth} if auth else {}
            r = srv.request(method, path, headers=h, json=body if method == "POST" else None)
            if err_is(r, 401, "unauthorized", f"{method} {path} with {what}"):
                check(r.headers.get("WWW-Authenticate", "").startswith("Bearer"),
                      f"{method} {path} with {what}: WWW-Authenticate: Bearer",
                      r.headers.get("WWW-Authenticate"))
    r = srv.request("GET", "/v1/executions", keys["rotated_new"])
    check(r.status_code == 200, "the rotated key works", (r.status_code, r.text[:300]))


def runs(srv, key):
    cases = [("javascript", "console.log(1)", "1\n", None),
             ("python", "print(1)", "1\n", None),
             ("typescript", "const x: number = 6 * 7;\nconsole.log(x);\nx", "42\n", 42),
             ("javascript", "process.stdout.write('a\\u0000b'); 6 * 7", "a\ufffdb", 42)]
    for lang, code, out, result in cases:
        r = srv.create(key, {"language": lang, "code": code}, wait=120)
        check(r.status_code == 201, f"{lang} {code!r}: 201", (r.status_code, r.text[:500]))
        if r.status_code != 201:
            continue
        ex = r.json()
        is_execution(ex, f"{lang} run")
        check(r.headers.get("Location") == f"/v1/executions/{ex['id']}", "Location header",
              r.headers.get("Location"))
        check((ex["status"], ex["exit_code"], ex["stdout"], ex["stderr"], ex["result"]) ==
              ("ok", 0, out, "", result) and ex["language"] == lang and
              ex["timeout_ms"] == 30000 and ex["output_limit"] == 10485760 and
              ex["catalog"] is None and ex["tool_calls"] == [],
              f"{lang} {code!r}: ok, its output, result and defaults", ex)
        g = srv.get(key, ex["id"])
        check(g.status_code == 200 and g.json() == ex, "GET gives the same object", g.text[:500])
    # A function call: its value is the result; 2^53 + 1 reaches Python's int exactly.
    calls = [({"language": "python", "code": "def f(a, b):\n    return [a, b]",
               "entry": "f", "args": [9007199254740993, "x"]}, [9007199254740993, "x"]),
             ({"language": "javascript", "code": "async function add(a, b) { return a + b }",
               "entry": "add", "args": [40, 2]}, 42)]
    for body, result in calls:
        r = srv.create(key, body, wait=120)
        ex = r.json() if r.status_code == 201 else {}
        check(ex.get("status") == "ok" and ex.get("result") == result,
              f"{body['language']} entry {body['entry']}: its value is the result",
              r.text[:500])
    r = srv.create(key, {"language": "javascript", "code": "console.log('x');\n"
                         "throw new Error('boom')", "timeout_ms": 60000, "output_limit": 100})
    check(r.status_code == 201 and r.json()["status"] in ("queued", "running", "ok", "error"),
          "without ?wait: 201 at once", r.text[:500])
    if r.status_code == 201:
        ex = srv.wait_done(key, r.json()["id"])
        check(ex.get("status") == "error" and "boom" in ((ex.get("error") or {}).get("message")
                                                         or "") and ex.get("stdout") == "x\n"
              and ex.get("timeout_ms") == 60000 and ex.get("output_limit") == 100,
              "a thrown error: status error, its message, the limits asked for", ex)
    r = srv.create(key, {"language": "python", "code": "print('x' * 1000)", "output_limit": 10},
                   wait=120)
    ex = r.json() if r.status_code == 201 else {}
    check(ex.get("output_truncated") is True and len(ex.get("stdout", "")) <= 10,
          "output_limit cuts stdout", ex)
    r = srv.create(key, {"language": "python", "code": "while True: pass", "timeout_ms": 1000},
                   wait=120)
    check(r.status_code == 201 and r.json().get("status") == "timeout", "timeout_ms: timeout",
          r.text[:500])
    # An answer later than the header deadline (10 s) still comes on its connection, and the
    # client goes on (each answer says Connection: close: docs/decisions.md).
    with requests.Session() as s:
        s.headers["Authorization"] = "Bearer " + key
        r = s.post(srv.base + "/v1/executions?wait=120", timeout=150,
                   json={"language": "python", "code": "import time\ntime.sleep(13)\nprint('late')",
                         "timeout_ms": 60000})
        check(r.status_code == 201 and r.json().get("stdout") == "late\n",
              "?wait= answered after 13 s (past the header deadline)", r.text[:300])
        time.sleep(11)
        r = s.get(srv.base + "/v1/health", timeout=30)
        check(r.status_code == 200, "the same session, 11 s later: answered", r.text[:300])
        check(r.headers.get("Connection", "").lower() == "close",
              "answers say Connection: close (the server keeps no connection alive)",
              dict(r.headers))
    # ?wait that passes first: 201 with the execution still running.
    t0 = time.monotonic()
    r = srv.create(key, {"language": "javascript", "code": "while (true) {}",
                         "timeout_ms": 20000}, wait=1)
    check(r.status_code == 201 and r.json().get("status") in ("queued", "running") and
          time.monotonic() - t0 < 15, "?wait=1 on a long run: 201, still queued or running",
          r.text[:300])
    if r.status_code == 201:
        srv.request("POST", f"/v1/executions/{r.json()['id']}/cancel", key)


def listing(srv, key):
    ids = []
    for i in range(3):
        r = srv.create(key, {"language": "python", "code": f"print({i})"}, wait=120)
        if r.status_code == 201:
            ids.append(r.json()["id"])
    r = srv.request("GET", "/v1/executions", key)
    check(r.status_code == 200, "GET /v1/executions: 200", r.text[:300])
    if r.status_code != 200:
        return
    page = r.json()
    check(not api.conforms(DOC, page, {"$ref": "#/components/schemas/ExecutionList"}),
          "an ExecutionList", api.conforms(DOC, page, {"$ref": "#/components/schemas/ExecutionList"}))
    got = [e["id"] for e in page["executions"]]
    check(got[:3] == ids[::-1], "newest first", (got, ids))
    check(all(not ({"stdout", "stderr", "tool_calls"} & set(e)) for e in page["executions"]),
          "list items have no stdout, stderr, tool_calls")
    created = [ts(e["created_at"]) for e in page["executions"]]
    check(created == sorted(created, reverse=True), "created_at descending", created)
    seen, cursor, pages = [], None, 0
    while pages < 50:
        q = "?limit=2" + (f"&cursor={requests.utils.quote(cursor)}" if cursor else "")
        r = srv.request("GET", "/v1/executions" + q, key)
        if not check(r.status_code == 200, f"page {pages} by cursor", r.text[:300]):
            break
        p = r.json()
        check(len(p["executions"]) <= 2, "limit=2: at most 2")
        seen += [e["id"] for e in p["executions"]]
        cursor, pages = p["next_cursor"], pages + 1
        if cursor is None:
            break
    check(seen == got[:len(seen)] and len(seen) == len(set(seen)) and len(seen) >= len(got),
          "pages by cursor: every execution once, in order", (seen, got))
    r = srv.request("GET", "/v1/executions?status=ok&limit=100", key)
    check(r.status_code == 200 and all(e["status"] == "ok" for e in r.json()["executions"]) and
          set(ids) <= {e["id"] for e in r.json()["executions"]}, "status=ok filter", r.text[:300])
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    past = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = srv.request("GET", f"/v1/executions?created_after={future}", key)
    check(r.status_code == 200 and r.json()["executions"] == [] and
          r.json()["next_cursor"] is None, "created_after in the future: none", r.text[:300])
    r = srv.request("GET", f"/v1/executions?created_before={past}", key)
    check(r.status_code == 200 and r.json()["executions"] == [], "created_before yesterday: none",
          r.text[:300])
    r = srv.request("GET", f"/v1/executions?created_after={past}&created_before={future}&limit=100",
                    key)
    check(r.status_code == 200 and set(ids) <= {e["id"] for e in r.json()["executions"]},
          "created_after and created_before around now: ours", r.text[:300])


def streams(srv, key):
    code = ("for (let i = 0; i < 3; i++) {\n  console.log('line' + i);\n"
            "  await new Promise((r) => setTimeout(r, 300));\n}\nconsole.error('err');\n7")
    for ndjson in (False, True):
        kind = "NDJSON" if ndjson else "SSE"
        r = srv.create(key, {"language": "javascript", "code": code})
        if not check(r.status_code == 201, f"{kind}: created", r.text[:300]):
            continue
        ex_id = r.json()["id"]
        for when in ("live", "replayed"):
            st, ctype, evs, ended = srv.events(key, ex_id, ndjson=ndjson)
            want = "application/x-ndjson" if ndjson else "text/event-stream"
            check(st == 200 and ctype.split(";")[0].strip() == want, f"{kind} {when}: 200 {want}",
                  (st, ctype))
            names = [e[0] for e in evs]
            check(ended and names and names[-1] == "done" and names.count("done") == 1,
                  f"{kind} {when}: ends after one done", names)
            out = "".join(d["data"] for n, d in evs if n == "output" and d["stream"] == "stdout")
            err = "".join(d["data"] for n, d in evs if n == "output" and d["stream"] == "stderr")
            check(out == "line0\nline1\nline2\n" and err == "err\n",
                  f"{kind} {when}: the output in order", evs)
            for n, d in evs:
                errs = api.conforms(DOC, {"event": n, "data": d},
                                    {"$ref": "#/components/schemas/EventLine"})
                check(not errs, f"{kind} {when}: event {n} as documented", (errs, d))
            if names and names[-1] == "done":
                done = evs[-1][1]
                is_execution(done, f"{kind} {when}: done's data")
                check(done.get("id") == ex_id and done.get("status") == "ok" and
                      done.get("result") == 7, f"{kind} {when}: done is the ended execution", done)
    # Without Accept: server-sent events (the default).
    r = srv.create(key, {"language": "python", "code": "print(5)"}, wait=120)
    if r.status_code == 201:
        with srv.request("GET", f"/v1/executions/{r.json()['id']}/events", key, stream=True) as s:
            check(s.status_code == 200 and
                  s.headers.get("Content-Type", "").startswith("text/event-stream"),
                  "events without Accept: text/event-stream", s.headers.get("Content-Type"))


def cancel(srv, key):
    r = srv.create(key, {"language": "javascript", "code": "while (true) {}",
                         "timeout_ms": 120000})
    if not check(r.status_code == 201, "a busy loop created", r.text[:300]):
        return
    ex_id = r.json()["id"]
    check(api.wait_until(lambda: srv.get(key, ex_id).json()["status"] == "running", 120, 0.2),
          "the busy loop runs")
    r = srv.request("POST", f"/v1/executions/{ex_id}/cancel", key)
    check(r.status_code == 202, "cancel: 202", r.text[:300])
    if r.status_code == 202:
        is_execution(r.json(), "cancel's answer")
    t0 = time.monotonic()
    ex = srv.wait_done(key, ex_id, timeout=60)
    check(ex.get("status") in ("cancelled", "terminated") and time.monotonic() - t0 < 30 and
          ex.get("finished_at") is not None, "cancelled: ended as cancelled or terminated", ex)
    r = srv.request("POST", f"/v1/executions/{ex_id}/cancel", key)
    err_is(r, 409, "conflict", "cancel of an ended execution")
    r = srv.request("POST", "/v1/executions/ex_doesnotexist/cancel", key)
    err_is(r, 404, "not_found", "cancel of an unknown id")


def isolation(srv, ka, kb):
    r = srv.create(ka, {"language": "python", "code": "print('mine')"}, wait=120)
    if not check(r.status_code == 201, "A's execution", r.text[:300]):
        return
    ex_id = r.json()["id"]
    err_is(srv.get(kb, ex_id), 404, "not_found", "B gets A's execution")
    err_is(srv.get(kb, ex_id, wait=1), 404, "not_found", "B gets A's execution with ?wait")
    err_is(srv.request("POST", f"/v1/executions/{ex_id}/cancel", kb), 404, "not_found",
           "B cancels A's execution")
    err_is(srv.request("GET", f"/v1/executions/{ex_id}/events", kb), 404, "not_found",
           "B streams A's events")
    r = srv.request("GET", "/v1/executions?limit=100", kb)
    check(r.status_code == 200 and ex_id not in [e["id"] for e in r.json()["executions"]],
          "B's list has not A's execution", r.text[:300])
    # A's id, with another tenant's key, is answered exactly as an unknown id.
    a = srv.get(kb, ex_id)
    b = srv.get(kb, "ex_" + "0" * len(ex_id[3:]))
    check(a.status_code == b.status_code and a.json()["error"]["code"] ==
          b.json()["error"]["code"], "another tenant's id is answered as an unknown one",
          (a.text, b.text))


def malformed(srv, key):
    ex = "/v1/executions"
    js = {"Content-Type": "application/json"}
    posts = [
        ("not JSON", b"{nope", js, 400, "bad_request"),
        ("JSON not an object", b"[1,2]", js, 400, "bad_request"),
        ("a JSON string", b'"x"', js, 400, "bad_request"),
        ("an empty body", b"", js, 400, "bad_request"),
        ("no language", {"code": "1"}, None, 400, "bad_request"),
        ("no code", {"language": "python"}, None, 400, "bad_request"),
        ("language not a string", {"language": 1, "code": "1"}, None, 400, "bad_request"),
        ("code not a string", {"language": "python", "code": 1}, None, 400, "bad_request"),
        ("unknown language", {"language": "cobol", "code": "1"}, None, 400, "bad_request"),
        ("empty code", {"language": "python", "code": ""}, None, 400, "bad_request"),
        ("unknown member", {"language": "python", "code": "1", "x": 1}, None, 400,
         "bad_request"),
        ("timeout_ms 0", {"language": "python", "code": "1", "timeout_ms": 0}, None, 400,
         "bad_request"),
        ("timeout_ms over the tenant's", {"language": "python", "code": "1",
                                          "timeout_ms": 301000}, None, 400, "bad_request"),
        ("timeout_ms a string", {"language": "python", "code": "1", "timeout_ms": "5"}, None,
         400, "bad_request"),
        ("timeout_ms 1.5", {"language": "python", "code": "1", "timeout_ms": 1.5}, None, 400,
         "bad_request"),
        ("output_limit 0", {"language": "python", "code": "1", "output_limit": 0}, None, 400,
         "bad_request"),
        ("output_limit over the tenant's", {"language": "python", "code": "1",
                                            "output_limit": 10485761}, None, 400, "bad_request"),
        ("catalog not allowed", {"language": "python", "code": "1", "catalog": "approvals"},
         None, 400, "bad_request"),
        ("catalog unknown", {"language": "python", "code": "1", "catalog": "nope"}, None, 400,
         "bad_request"),
        ("catalog a number", {"language": "python", "code": "1", "catalog": 3}, None, 400,
         "bad_request"),
        ("code over 1 MiB", {"language": "javascript", "code": "x" * ((1 << 20) + 1)}, None, 400,
         "bad_request"),
        ("entry not an identifier", {"language": "python", "code": "1", "entry": "os.system"},
         None, 400, "bad_request"),
        ("args not an array", {"language": "python", "code": "1", "entry": "f",
                               "args": {"a": 1}}, None, 400, "bad_request"),
        ("kwargs not an object", {"language": "python", "code": "1", "entry": "f",
                                  "kwargs": [1]}, None, 400, "bad_request"),
        ("args without entry", {"language": "python", "code": "1", "args": [1]}, None, 400,
         "bad_request"),
        ("kwargs for javascript", {"language": "javascript", "code": "1", "entry": "f",
                                   "kwargs": {"a": 1}}, None, 400, "bad_request"),
        ("text/plain", b'{"language":"python","code":"1"}', {"Content-Type": "text/plain"}, 415,
         "unsupported_media_type"),
        ("no content type", b'{"language":"python","code":"1"}', {}, 415,
         "unsupported_media_type"),
        ("duplicate keys", b'{"language":"python","code":"1","code":"2"}', js, 400,
         "bad_request"),
        ("invalid UTF-8", b'{"language":"python","code":"\xff"}', js, 400, "bad_request"),
    ]
    for what, body, headers, status, code in posts:
        if isinstance(body, dict):
            r = srv.request("POST", ex, key, json=body)
        else:
            r = srv.request("POST", ex, key, data=body, headers=headers)
        err_is(r, status, code, f"POST {ex} with {what}")
    gets = [("/v1/executions?limit=0", "limit=0"), ("/v1/executions?limit=101", "limit=101"),
            ("/v1/executions?limit=x", "limit=x"), ("/v1/executions?status=nope", "status=nope"),
            ("/v1/executions?created_after=yesterday", "created_after not RFC 3339"),
            ("/v1/executions?cursor=%00garbage", "a bad cursor"),
            ("/v1/executions?cursor=AAAA", "a made-up cursor"),
            ("/v1/executions?bogus=1", "an unknown parameter"),
            ("/v1/executions/ex_x?wait=301", "wait=301"),
            ("/v1/executions/ex_x?wait=-1", "wait=-1")]
    for path, what in gets:
        err_is(srv.request("GET", path, key), 400, "bad_request", f"GET with {what}")
    r = srv.request("POST", ex + "?wait=301", key, json={"language": "python", "code": "1"})
    err_is(r, 400, "bad_request", "POST with wait=301")
    for method, path in [("GET", "/v1/nope"), ("GET", "/v2/executions"), ("GET", "/"),
                         ("GET", "/v1/executions/ex_nope"),
                         ("GET", "/v1/executions/ex_nope/events")]:
        err_is(srv.request(method, path, key), 404, "not_found", f"{method} {path}")
    for method, path in [("DELETE", "/v1/executions"), ("PUT", "/v1/executions"),
                         ("GET", "/v1/executions/ex_nope/cancel"), ("POST", "/v1/health"),
                         ("DELETE", "/v1/approvals"), ("GET", "/v1/approvals/1")]:
        r = srv.request(method, path, key)
        err_is(r, 405, "method_not_allowed", f"{method} {path}")
    for what, body in [("not JSON", b"nope"), ("no decision", b"{}"),
                       ("an unknown decision", b'{"decision":"maybe"}'),
                       ("an unknown member", b'{"decision":"approve","x":1}')]:
        r = srv.request("POST", "/v1/approvals/1", key, data=body,
                        headers={"Content-Type": "application/json"})
        check(r.status_code in (400, 404), f"POST /v1/approvals/1 with {what}: 400 (or 404)",
              r.text[:300])
    r = srv.request("POST", "/v1/approvals/1", key, data=b'{"decision":"approve"}',
                    headers={"Content-Type": "text/plain"})
    err_is(r, 415, "unsupported_media_type", "POST /v1/approvals/1 with text/plain")
    # A body over 7 MiB + 64 KiB: 413, or the connection closed before the body was read.
    try:
        r = srv.request("POST", ex, key, data=b"x" * (BODY_MAX + 1), headers=js, timeout=60)
        err_is(r, 413, "payload_too_large", "a body over 7 MiB + 64 KiB")
    except requests.ConnectionError:
        check(True, "a body over 7 MiB + 64 KiB: closed")
    # A header section over 64 KiB: 400 or 431, or closed.
    status = raw_request(srv.port, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" +
                         b"".join(b"X-Big-%d: %s\r\n" % (i, b"y" * 1000) for i in range(70)) +
                         b"\r\n")
    check(status in (400, 431, None), "a header section over 64 KiB: 400/431 or closed", status)
    check(srv.request("GET", "/v1/health").status_code == 200, "the server lives on")


def raw_request(port, data, timeout=20):
    """The HTTP status the server answers @data with, or None if it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            head = s.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            return None
    if not head:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


def slowloris(srv):
    """A client sending its headers a byte a second is cut off by the header timeout (15 s)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    t0, closed_at = time.monotonic(), None
    try:
        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        while time.monotonic() - t0 < 30:
            try:
                s.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic()
                break
            if select.select([s], [], [], 1.0)[0]:
                try:
                    s.recv(4096)  # an error answer (408) or EOF: cut off either way
                except ConnectionResetError:
                    pass
                closed_at = time.monotonic()
                break
    finally:
        s.close()
    check(closed_at is not None and closed_at - t0 <= 20,
          "a slow client is cut off within ~15 s",
          f"still open after {time.monotonic() - t0:.0f} s" if closed_at is None else
          f"after {closed_at - t0:.1f} s")
    check(srv.request("GET", "/v1/health").status_code == 200, "the server lives on")


def put_head(port, key, length):
    """A socket that sent a file PUT's headers announcing @length bytes, and no body. With
    `Expect: 100-continue` the server says at once whether it takes the body: 100, or the
    refusal."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    s.sendall(b"PUT /v1/sessions/se_00000000000000000000000000/files/a HTTP/1.1\r\n"
              b"Host: 127.0.0.1\r\nExpect: 100-continue\r\n" + auth +
              b"Content-Length: %d\r\n\r\n" % length)
    return s


def answer_of(s, wait):
    """The status the server answered on @s within @wait seconds (100: go on); None: none."""
    s.settimeout(wait)
    try:
        head = s.recv(4096)
    except socket.timeout:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


def bodies_held(srv, ka, kb):
    """Bodies announced but not sent yet count against the server's bound (docs/api.md):
    without a key, 401 before the body; a tenant holds at most 64 MiB; a client that goes
    gives its part back."""
    big = 32 << 20
    s = put_head(srv.port, None, big)
    check(answer_of(s, 10) == 401, "a 32 MiB body without a key: 401 before it is sent")
    s.close()
    held = [put_head(srv.port, ka, big), put_head(srv.port, ka, big)]
    try:
        check(all(answer_of(h, 10) == 100 for h in held),
              "two 32 MiB bodies of a tenant: 100 Continue")
        third = put_head(srv.port, ka, big)
        check(answer_of(third, 10) == 503, "a third (past 64 MiB for one tenant): 503 at once")
        third.close()
        other = put_head(srv.port, kb, big)
        check(answer_of(other, 10) == 100, "another tenant's body is still taken")
        other.close()
    finally:
        for h in held:
            h.close()
    time.sleep(0.5)  # the server sees the clients gone
    again = [put_head(srv.port, ka, big), put_head(srv.port, ka, big)]
    check(all(answer_of(h, 10) == 100 for h in again),
          "the clients gone, the tenant's two bodies are taken again")
    for h in again:
        h.close()


def connections(srv):
    """Many idle connections: beyond the cap they are refused or wait; the server lives on."""
    conns = []
    try:
        for _ in range(600):
            try:
                conns.append(socket.create_connection(("127.0.0.1", srv.port), timeout=2))
            except OSError:
                break
        time.sleep(0.5)
        check(srv.proc.poll() is None, "600 idle connections: the server is alive")
    finally:
        for c in conns:
            c.close()
    check(api.wait_until(lambda: srv.request("GET", "/v1/health", timeout=5).status_code == 200,
                         20), "after the idle connections went: the server answers")


def quotas(srv, keys):
    k1 = keys["conc1"]
    r1 = srv.create(k1, {"language": "javascript", "code": "while (true) {}",
                         "timeout_ms": 60000})
    check(r1.status_code == 201, "max-concurrent 1: the first", r1.text[:300])
    r2 = srv.create(k1, {"language": "python", "code": "1"})
    if err_is(r2, 429, "rate_limited", "max-concurrent 1: a second at once"):
        ra = r2.headers.get("Retry-After", "")
        check(ra.isdigit(), "429 has Retry-After: SECONDS", ra)
    if r1.status_code == 201:
        srv.request("POST", f"/v1/executions/{r1.json()['id']}/cancel", k1)
        srv.wait_done(k1, r1.json()["id"], timeout=60)
        r3 = srv.create(k1, {"language": "python", "code": "print(3)"}, wait=120)
        check(r3.status_code == 201 and r3.json().get("status") == "ok",
              "max-concurrent 1: another once the first ended", r3.text[:300])
    k2 = keys["rate2"]
    got = [srv.create(k2, {"language": "python", "code": "1"}, wait=120) for _ in range(3)]
    check([r.status_code for r in got[:2]] == [201, 201], "per-minute 2: two pass",
          [r.status_code for r in got])
    if err_is(got[2], 429, "rate_limited", "per-minute 2: the third within a minute"):
        ra = got[2].headers.get("Retry-After", "")
        check(ra.isdigit() and 0 < int(ra) <= 60, "429 Retry-After within the minute", ra)


def fairness(srv, kf, kg):
    """Tenant F floods FLOOD executions, G sends 10 just after: G's are served in turn with F's
    (per-tenant queues), so all of G's end before the last half of F's. F retries on 429."""
    f_ids, lock, errors = [], threading.Lock(), []
    started = threading.Event()

    def flood():
        while len(f_ids) < FLOOD and not errors:
            r = srv.create(kf, {"language": "javascript", "code": "1"}, timeout=60)
            if r.status_code == 201:
                with lock:
                    f_ids.append(r.json()["id"])
                if len(f_ids) >= min(FLOOD, 20):
                    started.set()
            elif r.status_code == 429:
                started.set()
                time.sleep(min(float(r.headers.get("Retry-After", "1") or 1), 2) / 4)
            else:
                errors.append(f"{r.status_code} {r.text[:200]}")
        started.set()

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    check(started.wait(300), "the flood began")
    g_ids = []
    for _ in range(10):
        r = srv.create(kg, {"language": "javascript", "code": "1"})
        if check(r.status_code == 201, "G's execution accepted during F's flood", r.text[:300]):
            g_ids.append(r.json()["id"])
    t.join(timeout=FLOOD * 5 + 120)
    check(not t.is_alive() and not errors and len(f_ids) == FLOOD,
          f"F's {FLOOD} accepted", (len(f_ids), errors[:3]))
    deadline = time.monotonic() + FLOOD * 5 + 300
    done = {}
    for k, ids in ((kf, f_ids), (kg, g_ids)):
        for i in ids:
            ex = srv.wait_done(k, i, timeout=max(10, deadline - time.monotonic()))
            done[i] = ex
    ended = {i: e.get("finished_at") for i, e in done.items()}
    if not check(f_ids and len(g_ids) == 10 and all(ended.values()) and all(e.get("status") == "ok" for e in done.values()),
                 "every flood execution ended ok",
                 [e for e in done.values() if e.get("status") != "ok"][:3]):
        return
    f_end = sorted(ts(ended[i]) for i in f_ids)
    g_last = max(ts(ended[i]) for i in g_ids)
    tail = f_end[-max(1, len(f_end) // 2):]
    check(g_last < tail[0], f"G's 10 ended before the last {len(tail)} of F's {len(f_end)}",
          f"G's last {g_last}, F's ends {f_end[0]} .. {f_end[-1]}, last half from {tail[0]}")


def catalogs(tmp):
    d = os.path.join(tmp, "catalogs")
    os.makedirs(d)
    cat = {"providers": {"calc": {"kind": "command", "command": [CALC], "tools": {"add": {}}}},
           "policy": {"rules": [{"match": "calc.add", "action": "approve"}],
                      "approval_timeout_ms": 60000}}
    with open(os.path.join(d, "approvals.json"), "w") as f:
        json.dump(cat, f)
    return d


def approvals(srv, ka, kb):
    code = "const r = await tools.calc.add({a: 2, b: 40});\nconsole.log('got', r.result);\nr.result"
    for decision in ("approve", "deny"):
        r = srv.create(ka, {"language": "javascript", "code": code, "catalog": "approvals",
                            "timeout_ms": 120000})
        if not check(r.status_code == 201, f"{decision}: an execution with the catalog",
                     r.text[:300]):
            return
        ex_id = r.json()["id"]
        check(r.json().get("catalog") == "approvals", "the execution names its catalog")
        pending = []

        def listed():
            pending[:] = [a for a in srv.request("GET", "/v1/approvals", ka).json()["approvals"]
                          if a["execution_id"] == ex_id]
            return pending
        if not check(api.wait_until(listed, 120, 0.3), f"{decision}: the approval is listed"):
            srv.request("POST", f"/v1/executions/{ex_id}/cancel", ka)
            continue
        a = pending[0]
        errs = api.conforms(DOC, a, {"$ref": "#/components/schemas/Approval"})
        check(not errs and a["provider"] == "calc" and a["tool"] == "add" and
              a["input"] == {"a": 2, "b": 40} and a["timeout_ms"] == 60000,
              "the approval as documented", (errs, a))
        others = srv.request("GET", "/v1/approvals", kb).json()["approvals"]
        check(all(o["id"] != a["id"] for o in others), "B does not see A's approval", others)
        r = srv.request("POST", f"/v1/approvals/{a['id']}", kb, json={"decision": "approve"})
        err_is(r, 404, "not_found", "B answers A's approval")
        r = srv.request("POST", f"/v1/approvals/{a['id']}", ka, json={"decision": "yes"})
        err_is(r, 400, "bad_request", "decision yes")
        r = srv.request("POST", f"/v1/approvals/{a['id']}", ka, json={"decision": decision})
        check(r.status_code == 200 and r.json() == {"id": a["id"], "decision": decision},
              f"{decision}: 200 with the answer", r.text[:300])
        r = srv.request("POST", f"/v1/approvals/{a['id']}", ka, json={"decision": decision})
        err_is(r, 404, "not_found", "an approval answered twice")
        ex = srv.wait_done(ka, ex_id)
        calls = ex.get("tool_calls") or [{}]
        if decision == "approve":
            check(ex.get("status") == "ok" and ex.get("result") == 42 and
                  ex.get("stdout") == "got 42\n" and calls[0].get("ok") is True and
                  calls[0].get("provider") == "calc" and calls[0].get("tool") == "add",
                  "approved: the tool ran", ex)
            st, _, evs, _ = srv.events(ka, ex_id, ndjson=True)
            names = [n for n, _ in evs]
            check(st == 200 and {"tool_call", "approval", "tool_result"} <= set(names[:-1]) and
                  names[-1:] == ["done"] and names.index("tool_call") < names.index("tool_result"),
                  "events: tool_call, approval, tool_result, then done", names)
        else:
            check(ex.get("status") == "error" and calls[0].get("ok") is False,
                  "denied: the call failed, and the program", ex)


def kill9(srv, key):
    """kill -9 of the server mid-execution: its VMs go too; the restarted server (same store)
    says the execution was interrupted, and shows one that ended before as it was (its
    record)."""
    r = srv.create(key, {"language": "python", "code": "print('kept'); [1, 2.50]"}, wait=120)
    before = r.json() if r.status_code == 201 else {}
    check(before.get("status") == "ok", "kill -9: one that ends first", r.text[:300])
    r = srv.create(key, {"language": "javascript", "code": "while (true) {}",
                         "timeout_ms": 120000})
    if not check(r.status_code == 201, "kill -9: a busy loop", r.text[:300]):
        return None
    ex_id = r.json()["id"]
    check(api.wait_until(lambda: srv.get(key, ex_id).json()["status"] == "running", 120, 0.2),
          "kill -9: the busy loop runs")
    old = srv.kill9()
    check(len(old) > 0, "the server had children (QEMUs)", old)
    left = srv.leftovers(timeout=15)
    check(left == [], "no process of the killed server is left (by PID)", left)
    why = srv.start()
    if not check(why is None, "the server restarts on the same store", why):
        return None
    r = srv.get(key, ex_id)
    check(r.status_code == 200 and r.json().get("status") == "interrupted" and
          r.json().get("finished_at") is not None, "after kill -9: interrupted", r.text[:500])
    if r.status_code == 200:
        is_execution(r.json(), "an interrupted execution from its record")
    if before:
        r = srv.get(key, before["id"])
        after = r.json() if r.status_code == 200 else {}
        same = ("status", "exit_code", "result", "error", "stdout", "stderr", "tool_calls",
                "language", "timeout_ms", "output_limit", "catalog", "duration_ms")
        check(r.status_code == 200 and all(after.get(k) == before.get(k) for k in same) and
              ts(after["created_at"]) - ts(before["created_at"]) < timedelta(milliseconds=1),
              "after the restart, an ended execution from its record as it was",
              (before, r.text[:500]))
        if r.status_code == 200:
            is_execution(after, "an ended execution from its record")
            check(after.get("result") == [1, 2.5] and after.get("stdout") == "kept\n",
                  "its result and output from the record", r.text[-300:])
    r = srv.request("GET", "/v1/executions?limit=100", key)
    listed = [e["id"] for e in r.json().get("executions", [])] if r.status_code == 200 else []
    check(ex_id in listed and (not before or before["id"] in listed),
          "after the restart, the list has both (from the records)", r.text[:300])
    if r.status_code == 200:
        check(not api.conforms(DOC, r.json(), {"$ref": "#/components/schemas/ExecutionList"}),
              "an ExecutionList from records",
              api.conforms(DOC, r.json(), {"$ref": "#/components/schemas/ExecutionList"}))
    r = srv.request("POST", f"/v1/executions/{ex_id}/cancel", key)
    err_is(r, 409, "conflict", "cancel of an interrupted execution")
    r = srv.request("GET", f"/v1/executions/{ex_id}/events", key,
                    headers={"Accept": "application/x-ndjson"})
    lines = [json.loads(x) for x in r.text.splitlines() if x.strip()] if r.ok else []
    check([x.get("event") for x in lines] == ["done"] and
          lines[0]["data"].get("status") == "interrupted",
          "the events of an execution from its record: its end", r.text[:300])
    return ex_id


def curl(srv, key):
    base = srv.base

    def run(*args, timeout=180):
        p = subprocess.run(["curl", "-sS", "--max-time", str(timeout - 10), *args],
                           capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    rc, out = run("-o", "/dev/null", "-w", "%{http_code}", base + "/v1/executions")
    check(rc == 0 and out == "401", "curl without a key: 401", (rc, out))
    rc, out = run("-H", "Authorization: Bearer sbx_nope", "-o", "/dev/null", "-w",
                  "%{http_code}", base + "/v1/executions")
    check(rc == 0 and out == "401", "curl with a bad key: 401", (rc, out))
    rc, out = run("-H", f"Authorization: Bearer {key}", "-H", "Content-Type: application/json",
                  "-d", '{"language":"python","code":"print(6*7)"}',
                  base + "/v1/executions?wait=120")
    ex = json.loads(out) if rc == 0 and out.startswith("{") else {}
    check(ex.get("status") == "ok" and ex.get("stdout") == "42\n", "curl: create and wait",
          (rc, out[:500]))
    if ex.get("id"):
        rc, out = run("-N", "-H", f"Authorization: Bearer {key}",
                      f"{base}/v1/executions/{ex['id']}/events")
        check(rc == 0 and "event: output" in out and "event: done" in out and
              out.rstrip().endswith("}"), "curl -N: SSE with output and done", (rc, out[:800]))


def example(srv, key):
    """The Python client README.md shows (docs/examples/api-client.py), as a user runs it."""
    script = os.path.join(api.TOP, "docs", "examples", "api-client.py")
    p = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SANDBOX_API=srv.base, SANDBOX_KEY=key))
    check(p.returncode == 0 and "done ok result 42" in p.stdout and
          "stdout '0\\n1\\n2\\n'" in p.stdout, "README's Python client: create, follow, fetch",
          (p.returncode, p.stdout[-1000:], p.stderr[-1000:]))


def run_curl(args, timeout=180):
    """curl ARGS: its exit status and stdout."""
    p = subprocess.run(["curl", "-sS", "--max-time", str(timeout - 10), *args],
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def tls(tmp, servers):
    """--tls-cert/--tls-key: HTTPS with a self-signed certificate (openssl), trusted by the
    client; plain HTTP on that port gets no answer; an execution over TLS; curl too."""
    cert, key = os.path.join(tmp, "tls-cert.pem"), os.path.join(tmp, "tls-key.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=60)
    if not check(p.returncode == 0, "openssl made a certificate (scripts/setup)", p.stderr):
        return
    db = os.path.join(tmp, "tls-state", "sandbox.db")  # one server per store
    k = api.tenant(SANDBOX, db, "add", "tls-tenant")
    srv = api.Server(SANDBOX, tmp, db, name="tls", pool=1, tls=(cert, key))
    servers.append(srv)
    why = srv.start()
    if not check(why is None, "sandbox serve --listen --tls-cert --tls-key answers over HTTPS",
                 why):
        return
    try:
        requests.get(f"http://127.0.0.1:{srv.port}/v1/health", timeout=10)
        check(False, "plain HTTP on the TLS port: no answer")
    except requests.RequestException:
        check(True, "plain HTTP on the TLS port: no answer")
    try:
        requests.get(srv.base + "/v1/health", timeout=10, verify=True)
        check(False, "a client that does not trust the certificate refuses it")
    except requests.exceptions.SSLError:
        check(True, "a client that does not trust the certificate refuses it")
    r = srv.create(k, {"language": "python", "code": "print('tls')"}, wait=120)
    check(r.status_code == 201 and r.json().get("stdout") == "tls\n", "an execution over TLS",
          r.text[:300])
    rc, out = run_curl(["--cacert", cert, "-o", "/dev/null", "-w", "%{http_code}",
                        "-H", f"Authorization: Bearer {k}", srv.base + "/v1/executions"])
    check(rc == 0 and out == "200", "curl over TLS", (rc, out))
    check(srv.stop() == 0, "the TLS server: SIGTERM, exit 0")


def shutdown(srv):
    srv.track()
    rc = srv.stop()
    check(rc == 0, "SIGTERM: exit 0", rc)
    check(srv.leftovers() == [], "SIGTERM: none of the server's processes left")
    check(not os.path.exists(srv.sock), "the socket removed")


def main():
    if not os.path.exists(os.path.join(os.environ.get("SANDBOX_IMAGE_DIR", BUILD + "/image"),
                                       "manifest.json")) or \
            not os.path.exists(os.environ.get("SANDBOX_BRIDGE", BUILD + "/bridge/sandbox-bridge")):
        print("skipped: the guest image or the bridge is not built")
        return 77
    for tool in ("node", "curl"):
        check(shutil.which(tool) is not None, f"{tool} is installed (scripts/setup)")
    api.run_with_servers("sbx-http-", body, check, failures)
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


def body(tmp, servers):
    db = os.path.join(tmp, "state", "sandbox.db")
    keys = {"a": api.tenant(SANDBOX, db, "add", "alice", "--catalog", "approvals"),
            "b": api.tenant(SANDBOX, db, "add", "bob"),
            "removed": api.tenant(SANDBOX, db, "add", "gone"),
            "rotated_old": api.tenant(SANDBOX, db, "add", "rot"),
            "conc1": api.tenant(SANDBOX, db, "add", "one-at-a-time", "--max-concurrent", "1"),
            "rate2": api.tenant(SANDBOX, db, "add", "two-a-minute", "--per-minute", "2"),
            "flood": api.tenant(SANDBOX, db, "add", "flood", "--max-concurrent", "64",
                                "--per-minute", "6000"),
            "fair": api.tenant(SANDBOX, db, "add", "fair", "--max-concurrent", "64",
                               "--per-minute", "6000")}
    api.tenant(SANDBOX, db, "remove", "gone")
    keys["rotated_new"] = api.tenant(SANDBOX, db, "rotate-key", "rot")
    srv = api.Server(SANDBOX, tmp, db, pool=2, catalogs_dir=catalogs(tmp))
    servers.append(srv)
    why = srv.start()
    if not check(why is None, "sandbox serve --listen starts and answers /v1/health", why):
        return
    section(public, srv)
    section(unauthorized, srv, keys)
    section(runs, srv, keys["a"])
    section(listing, srv, keys["b"])
    section(streams, srv, keys["a"])
    section(cancel, srv, keys["a"])
    section(isolation, srv, keys["a"], keys["b"])
    section(malformed, srv, keys["b"])
    section(approvals, srv, keys["a"], keys["b"])
    section(quotas, srv, keys)
    section(curl, srv, keys["a"])
    section(example, srv, keys["b"])
    section(slowloris, srv)
    section(bodies_held, srv, keys["a"], keys["b"])
    section(connections, srv)
    section(fairness, srv, keys["flood"], keys["fair"])
    section(tls, tmp, servers)
    section(kill9, srv, keys["a"])
    if srv.proc.poll() is None:
        section(shutdown, srv)


if __name__ == "__main__":
    sys.exit(main())
