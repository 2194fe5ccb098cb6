#!/usr/bin/env python3
"""The HTTP API's OpenAPI document (host-agent/server/openapi.json, docs/api.md). Usage:
test-openapi.py [OPENAPI_JSON]

Validates it with validate-openapi.mjs (the npm validator installed by scripts/setup), checks
that broken copies fail the same validation (so this test fails if the document breaks), and
that the document says what docs/api.md says: every path and method, which need no key, the
statuses and headers of each operation, the error codes, the members of a creation's body.
Needs no VM."""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DOC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "host-agent", "server",
                                                         "openapi.json")
VALIDATE = os.path.join(HERE, "validate-openapi.mjs")
API_MD = os.path.join(TOP, "docs", "api.md")
failures = []
checks = [0]


def check(cond, what, detail=""):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, str(detail)[:2000], flush=True)


def validate(text):
    p = subprocess.run(["node", VALIDATE, "-"], input=text.encode(), capture_output=True,
                       timeout=60)
    return p.returncode, p.stderr.decode(errors="replace")


def broken_copies(doc):
    """(what, text) of copies that a validator must refuse."""
    def edit(f):
        d = json.loads(json.dumps(doc))
        f(d)
        return json.dumps(d)
    ok200 = lambda d: d["paths"]["/v1/health"]["get"]["responses"]["200"]
    return [
        ("no info", edit(lambda d: d.pop("info"))),
        ("an unknown top-level member", edit(lambda d: d.update(bogus=1))),
        ("a response without description", edit(lambda d: ok200(d).pop("description"))),
        ("a dangling $ref", edit(lambda d: ok200(d)["content"]["application/json"].update(
            schema={"$ref": "#/components/schemas/Nope"}))),
        ("a path not starting with /", edit(lambda d: d["paths"].update(
            {"v1/x": d["paths"]["/v1/health"]}))),
        ("a parameter without name", edit(lambda d: d["components"]["parameters"]["Wait"].pop(
            "name"))),
        ("openapi 3.0", edit(lambda d: d.update(openapi="3.0.3"))),
        ("not JSON", json.dumps(doc)[:-1]),
    ]


EXPECTED = {  # path -> method -> statuses (docs/api.md)
    "/v1/health": {"get": {"200", "503"}},
    "/v1/openapi.json": {"get": {"200"}},
    "/v1/executions": {"post": {"201", "400", "401", "413", "415", "429", "500", "503"},
                       "get": {"200", "400", "401", "500"}},
    "/v1/executions/{id}": {"get": {"200", "400", "401", "404", "500"}},
    "/v1/executions/{id}/cancel": {"post": {"202", "401", "404", "409", "500"}},
    "/v1/executions/{id}/events": {"get": {"200", "401", "404", "500"}},
    "/v1/executions/{id}/replay": {"post": {"200", "400", "401", "404", "409", "429", "500",
                                            "503"}},
    "/v1/approvals": {"get": {"200", "401", "500"}},
    "/v1/approvals/{id}": {"post": {"200", "400", "401", "404", "413", "415", "500"}},
    "/v1/sessions": {"post": {"201", "400", "401", "409", "413", "429", "500", "503"},
                     "get": {"200", "401", "500"}},
    "/v1/sessions/{id}": {"get": {"200", "401", "404", "500"},
                          "delete": {"200", "401", "404", "500"}},
    "/v1/sessions/{id}/executions": {"post": {"201", "400", "401", "404", "409", "413", "415",
                                              "429", "500", "503"}},
    "/v1/sessions/{id}/files": {"get": {"200", "400", "401", "404", "409", "500", "502"}},
    "/v1/sessions/{id}/files/{path}": {
        "put": {"201", "400", "401", "404", "409", "413", "500", "502", "507"},
        "get": {"200", "400", "401", "404", "409", "413", "500", "502"},
        "delete": {"204", "400", "401", "404", "409", "500", "502"}},
}
# 429s without Retry-After: a session quota frees when one of the tenant's sessions ends, at
# no time the server can tell (http-session.c sends none).
NO_RETRY_AFTER = {("post", "/v1/sessions")}
ERROR_CODES = {"bad_request", "unauthorized", "not_found", "method_not_allowed", "conflict",
               "payload_too_large", "unsupported_media_type", "rate_limited", "unavailable",
               "internal", "guest_failed", "workspace_full", "not_replayable", "cannot_replay"}


def deref(doc, node):
    """@node with its $ref (if any) followed, repeatedly."""
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for k in node["$ref"][2:].split("/"):
            target = target[k.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def api_md_endpoints():
    """The (METHOD, path) of each row of docs/api.md's "Endpoints" table, without the query."""
    with open(API_MD) as f:
        section = f.read().split("\n## Endpoints\n", 1)[1]
    rows = []
    for line in section.lstrip("\n").splitlines():
        if not line.startswith("|"):
            break
        m = re.match(r"\| `([A-Z]+) (/[^`\[?]*)", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


def contents(doc):
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    got = {p: {m: set(op["responses"]) for m, op in item.items() if m in methods}
           for p, item in doc["paths"].items()}
    check(got == EXPECTED, "the paths, methods and statuses are docs/api.md's", got)
    listed = api_md_endpoints()
    ops = {(m.upper(), p) for p, item in got.items() for m in item}
    check(len(listed) == len(set(listed)) and set(listed) == ops,
          "docs/api.md's Endpoints table lists the document's operations",
          f"only in docs/api.md: {sorted(set(listed) - ops)}; only in the document: "
          f"{sorted(ops - set(listed))}")
    check(doc.get("security") == [{"bearer": []}], "every operation needs the bearer key",
          doc.get("security"))
    sec = doc["components"]["securitySchemes"].get("bearer", {})
    check(sec.get("type") == "http" and sec.get("scheme") == "bearer", "bearer scheme", sec)
    for p, item in doc["paths"].items():
        for m, op in item.items():
            if m not in EXPECTED.get(p, {}):
                continue
            public = p in ("/v1/health", "/v1/openapi.json")
            check((op.get("security") == []) == public,
                  f"{m.upper()} {p}: {'no key' if public else 'a key'} needed")
            for status, resp in op["responses"].items():
                r = deref(doc, resp)
                body = r.get("content", {}).get("application/json", {}).get("schema")
                if status[0] in "45":
                    check(body == {"$ref": "#/components/schemas/Error"},
                          f"{m.upper()} {p} {status}: an Error body", r)
                if status == "401":
                    check("WWW-Authenticate" in r.get("headers", {}),
                          f"{m.upper()} {p} 401: WWW-Authenticate")
                if status == "429" and (m, p) not in NO_RETRY_AFTER:
                    check("Retry-After" in r.get("headers", {}),
                          f"{m.upper()} {p} 429: Retry-After")
    for p in ("/v1/executions", "/v1/sessions", "/v1/sessions/{id}/executions"):
        created = doc["paths"][p]["post"]["responses"]["201"]
        check("Location" in created.get("headers", {}), f"POST {p} 201 has Location")
    events = doc["paths"]["/v1/executions/{id}/events"]["get"]["responses"]["200"]["content"]
    check(set(events) == {"text/event-stream", "application/x-ndjson"}, "events: SSE and NDJSON",
          set(events))
    files = doc["paths"]["/v1/sessions/{id}/files/{path}"]
    got = files["get"]["responses"]["200"]
    check(set(got["content"]) == {"application/octet-stream"} and
          "X-Sandbox-Sha256" in got.get("headers", {}),
          "a file's GET: its bytes, with X-Sandbox-Sha256", got)
    check(set(files["put"]["requestBody"]["content"]) == {"application/octet-stream"},
          "a file's PUT: its bytes")
    check("content" not in files["delete"]["responses"]["204"], "a file's DELETE: 204, no body")
    replay = doc["paths"]["/v1/executions/{id}/replay"]["post"]
    live = [deref(doc, q) for q in replay.get("parameters", [])]
    check([q.get("name") for q in live] == ["live"] and
          live[0].get("schema", {}).get("enum") == ["true", "false"] and
          "requestBody" not in replay, "replay: no body, the one parameter live=true|false", live)
    verdict = deref(doc, replay["responses"]["200"]["content"]["application/json"]["schema"])
    check(verdict.get("properties", {}).get("verdict", {}).get("enum") == ["identical",
                                                                          "diverged"] and
          {"divergence", "differences"} <= set(verdict.get("properties", {})) and
          set(verdict.get("required", [])) == {"id", "verdict", "duration_ms",
                                               "recorded_duration_ms"},
          "replay: 200 a verdict, identical or diverged, its divergence and differences",
          verdict)
    schemas = doc["components"]["schemas"]
    codes = set(schemas["Error"]["properties"]["error"]["properties"]["code"]["enum"])
    check(codes == ERROR_CODES, "the error codes", codes)
    ex = schemas["Execution"]
    check(set(ex["required"]) == set(ex["properties"]) and
          set(ex["properties"]) - set(schemas["ExecutionSummary"]["properties"]) ==
          {"stdout", "stderr", "tool_calls", "result", "error", "files"},
          "Execution and ExecutionSummary's members")
    se = schemas["Session"]
    check(set(se["required"]) == set(se["properties"]), "Session: every member always there")
    req = schemas["ExecutionRequest"]
    check(req.get("additionalProperties") is False and req["required"] == ["language", "code"],
          "ExecutionRequest: unknown members refused, language and code required")
    members = api_md_body_members()
    check(set(req["properties"]) == members,
          "ExecutionRequest's members are the body's in docs/api.md", (set(req["properties"]),
                                                                         members))
    call = req["properties"]
    check(call.get("entry", {}).get("pattern") == "^[A-Za-z_$][A-Za-z0-9_$]*$" and
          call.get("args", {}).get("type") == ["array", "null"] and
          call.get("kwargs", {}).get("type") == ["object", "null"],
          "ExecutionRequest: entry an identifier, args an array, kwargs an object")


def api_md_body_members():
    """The members of the table under `### POST /v1/executions` in docs/api.md."""
    with open(os.path.join(TOP, "docs", "api.md")) as f:
        text = f.read()
    section = text.split("### POST /v1/executions\n", 1)[1].split("\n#", 1)[0]
    return {line.split("`")[1] for line in section.splitlines()
            if line.startswith("| `")}


def main():
    with open(DOC) as f:
        text = f.read()
    rc, err = validate(text)
    check(rc == 0, f"{DOC} is valid OpenAPI 3.1 (rc {rc})", err)
    doc = json.loads(text)
    for what, broken in broken_copies(doc):
        rc, err = validate(broken)
        check(rc == 1 and err.strip() != "", f"a copy with {what} fails validation (rc {rc})",
              err)
    contents(doc)
    for f in failures:
        print("FAIL:", f)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
