// The official MCP TypeScript SDK's Client against `/mcp` of `sandbox serve --listen` (MCP over
// streamable HTTP, the tenant's API key as Bearer token), with real VMs. Run by
// sdk_http_test.py, which starts the server with two tenants (SBX_TEST_KEY_A may use the
// catalog "tools": a command provider and @modelcontextprotocol/server-everything) and checks
// that nothing is left behind.
//
// Usage: SBX_TEST_URL=http://127.0.0.1:PORT SBX_TEST_KEY_A=... SBX_TEST_KEY_B=...
//        SBX_TEST_SERVE_SOCKET=... node sdk_http_test.mjs
import assert from "node:assert/strict";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { serveStatus, waitFor } from "./mcp_test_lib.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SDK = path.join(HERE, "..", "..", ".deps", "mcp-sdk", "node_modules", "@modelcontextprotocol",
  "sdk", "dist", "esm");
const { Client } = await import(pathToFileURL(path.join(SDK, "client", "index.js")).href);
const { StreamableHTTPClientTransport } =
  await import(pathToFileURL(path.join(SDK, "client", "streamableHttp.js")).href);
const { ElicitRequestSchema } = await import(pathToFileURL(path.join(SDK, "types.js")).href);

const BASE = process.env.SBX_TEST_URL;
const KEY_A = process.env.SBX_TEST_KEY_A;
const KEY_B = process.env.SBX_TEST_KEY_B;
// Under TCG a restore and a run take seconds; the SDK's own default (60 s) is kept for the rest.
const CALL = { timeout: 180_000 };

async function connect(key, query = "", elicit = null) {
  const transport = new StreamableHTTPClientTransport(new URL(`${BASE}/mcp${query}`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  // With @elicit: a client that declares elicitation and answers it with @elicit(request).
  const client = new Client({ name: "sdk-http-test", version: "1.0.0" },
    elicit ? { capabilities: { elicitation: {} } } : undefined);
  if (elicit) client.setRequestHandler(ElicitRequestSchema, elicit);
  await client.connect(transport);
  return { client, transport };
}

function execute(client, args, options = CALL) {
  return client.callTool({ name: "execute", arguments: args }, undefined, options);
}

/** A request of the HTTP API (docs/api.md) as tenant @key: [status, body]. */
async function api(method, p, key) {
  const r = await fetch(`${BASE}${p}`, { method, headers: { Authorization: `Bearer ${key}` } });
  const text = await r.text();
  return [r.status, text ? JSON.parse(text) : null];
}

/** A raw POST to /mcp with @headers (Host included: node's http lets a test set it). */
function rawPost(headers, body) {
  const url = new URL(`${BASE}/mcp`);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname, port: url.port, path: "/mcp", method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        ...headers },
    }, (res) => {
      let data = "";
      res.on("data", (c) => { data += c; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

const INIT = {
  jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
};

const sections = {
  // The lifecycle and the tools, as over stdio.
  async tools() {
    const c = await connect(KEY_A);
    assert.equal(c.client.getServerVersion().name, "sandbox");
    assert.match(c.transport.sessionId, /^mcp_[0-9a-f]{32}$/);
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((t) => t.name),
      ["execute", "session_open", "session_close", "file_write", "file_read"]);
    assert.equal(tools[0].outputSchema.type, "object");
    await c.client.ping();
    await assert.rejects(c.client.callTool({ name: "nope", arguments: {} }), /unknown tool/);
    await c.transport.terminateSession();
    await c.client.close();
  },

  // Executions of the tenant: output and values, a function call, an error, the tenant's limits;
  // each one the API lists as the tenant's (and not the other's).
  async execute() {
    const c = await connect(KEY_A);
    const js = await execute(c.client, {
      language: "javascript", code: 'console.log("over http"); [1, 2, 3].map((x) => x * 2)',
    });
    assert.notEqual(js.isError, true, JSON.stringify(js));
    assert.deepEqual(js.structuredContent.result, [2, 4, 6]);
    assert.equal(js.structuredContent.stdout, "over http\n");
    assert.equal(js.structuredContent.exit_code, 0);
    assert.match(js.content[0].text, /result: \[2,4,6\]/);
    const [st, object] = await api("GET", `/v1/executions/${js.structuredContent.id}`, KEY_A);
    assert.equal(st, 200, "the execution is the tenant's, in the API");
    assert.equal(object.status, "ok");
    assert.equal(object.stdout, "over http\n");
    assert.equal((await api("GET", `/v1/executions/${js.structuredContent.id}`, KEY_B))[0], 404,
      "and not the other tenant's");
    const [py, ts] = await Promise.all([
      execute(c.client, {
        language: "python", code: "def add(a, b=0):\n    return a + b\n", entry: "add",
        args: [40], kwargs: { b: 2 },
      }),
      execute(c.client, { language: "typescript", code: "const n: number = 7;\nn * 6" }),
    ]);
    assert.equal(py.structuredContent.result, 42, JSON.stringify(py));
    assert.equal(ts.structuredContent.result, 42, JSON.stringify(ts));
    const thrown = await execute(c.client, {
      language: "javascript", code: 'throw new TypeError("bad thing")',
    });
    assert.equal(thrown.isError, true);
    assert.equal(thrown.structuredContent.error.type, "TypeError");
    // Over the tenant's own limit (sdk_http_test.py gives it --max-timeout 120).
    const long = await execute(c.client, { language: "python", code: "1", timeout_ms: 200000 });
    assert.equal(long.isError, true);
    assert.match(long.content[0].text, /over this tenant's limit/);
    await c.transport.terminateSession();
    await c.client.close();
  },

  // A program calling host tools of the catalog the URL names: a command and an MCP server.
  async catalog() {
    const c = await connect(KEY_A, "?catalog=tools");
    // The discovery tools over the catalog (its MCP server's tools listed by the server).
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((t) => t.name),
      ["execute", "session_open", "session_close", "file_write", "file_read", "list_providers",
        "search_tools", "get_tool_types"]);
    const text = (r) => {
      assert.notEqual(r.isError, true, JSON.stringify(r));
      return r.content[0].text;
    };
    const list = text(await c.client.callTool({ name: "list_providers", arguments: {} }));
    assert.match(list, /- calc \(command, 1 tools?\): tools\.calc\n/);
    assert.match(list, /- everything \(mcp, \d+ tools\): tools\.everything\n/);
    const ts = text(await c.client.callTool({ name: "get_tool_types",
      arguments: { tools: ["everything.echo"] } }));
    assert.match(ts, /echo\(input: \{ message: string; \}\)/);
    const run = await execute(c.client, {
      language: "javascript",
      code: 'const e = await tools.everything.echo({message: "hi"});\n' +
        "const s = await tools.calc.add({a: 2, b: 40});\n({echo: e[0].text, sum: s})",
    });
    assert.notEqual(run.isError, true, JSON.stringify(run));
    assert.equal(run.structuredContent.result.echo, "Echo: hi");
    assert.deepEqual(run.structuredContent.result.sum, { result: 42 });
    await c.transport.terminateSession();
    await c.client.close();
    // A catalog the tenant may not name is refused at initialize.
    const other = await rawPost({ Authorization: `Bearer ${KEY_B}` }, INIT);
    assert.equal(other.status, 200, other.body);
    const refused = await fetch(`${BASE}/mcp?catalog=tools`, {
      method: "POST", body: JSON.stringify(INIT),
      headers: { Authorization: `Bearer ${KEY_B}`, "Content-Type": "application/json",
        Accept: "application/json, text/event-stream" },
    });
    assert.equal(refused.status, 403);
  },

  // Progress while a call runs, on the POST's SSE stream.
  async progress() {
    const c = await connect(KEY_A);
    const progress = [];
    const slept = await execute(c.client, {
      language: "javascript",
      code: 'console.log("started");\nawait new Promise((r) => setTimeout(r, 8000)); "slept"',
    }, { ...CALL, onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true });
    assert.equal(slept.structuredContent.result, "slept", JSON.stringify(slept));
    // The output as it came, then the milliseconds so far of its timeout every 5 s.
    assert.ok(progress.length >= 2, JSON.stringify(progress));
    const out = progress.find((p) => p.message === "started\n"); // before or after a tick
    assert.ok(out && out.total === 30000, JSON.stringify(progress));
    const tick = progress.find((p) => /^running for \d+ s$/.test(p.message ?? ""));
    assert.ok(tick && tick.progress >= 5000 && tick.total === 30000, JSON.stringify(progress));
    await c.transport.terminateSession();
    await c.client.close();
  },

  // A cancel (notifications/cancelled in a POST of its own) ends the execution and its VM.
  async cancel() {
    const c = await connect(KEY_A);
    const abort = new AbortController();
    const call = execute(c.client, {
      language: "python", code: "import time\ntime.sleep(300)", timeout_ms: 100000,
    }, { ...CALL, signal: abort.signal });
    let running;
    await waitFor("the execution to run", async () => {
      running = await serveStatus();
      return running.running === 1;
    }, 120);
    const [pid] = running.running_pids;
    await new Promise((r) => setTimeout(r, 1000));
    abort.abort("the test cancels");
    await assert.rejects(call);
    await waitFor(`its QEMU (${pid}) to be gone`, () => !fs.existsSync(`/proc/${pid}`), 30);
    const [, list] = await api("GET", "/v1/executions?limit=1", KEY_A);
    assert.equal(list.executions[0].status, "cancelled", JSON.stringify(list));
    const again = await execute(c.client, { language: "javascript", code: "[1, 2].length" });
    assert.equal(again.structuredContent.result, 2, JSON.stringify(again));
    await c.transport.terminateSession();
    await c.client.close();
  },

  // Sandbox sessions as tools: state across executions, a binary file in and out, errors; the
  // server's sessions of the tenant (the API lists them), ended by a close or with the MCP
  // session that opened them.
  async sandbox_sessions() {
    const c = await connect(KEY_A);
    const call = (name, args) => c.client.callTool({ name, arguments: args }, undefined, CALL);
    const opened = await call("session_open", {});
    assert.equal(opened.isError, false, JSON.stringify(opened));
    const session = opened.structuredContent.session;
    assert.ok(opened.structuredContent.idle_timeout_s > 0);
    const [, listed] = await api("GET", `/v1/sessions/${session}`, KEY_A);
    assert.equal(listed.status, "ready", "the tenant's session, in the API");
    assert.equal((await api("GET", `/v1/sessions/${session}`, KEY_B))[0], 404, "not bob's");
    const st = await serveStatus();
    assert.equal(st.session_pids.length, 1, "one VM holds it");
    const [qemu] = st.session_pids;
    const py1 = await execute(c.client, { language: "python", code: "x = 41", session });
    assert.equal(py1.isError, false, JSON.stringify(py1));
    const py2 = await execute(c.client, { language: "python", code: "x + 1", session });
    assert.equal(py2.structuredContent.result, 42, JSON.stringify(py2));
    const [, ex] = await api("GET", `/v1/executions/${py2.structuredContent.id}`, KEY_A);
    assert.equal(ex.session, session, "the execution ran in the session");
    const bytes = crypto.randomBytes(70000);
    bytes[0] = 0;
    const digest = crypto.createHash("sha256").update(bytes).digest("hex");
    const wrote = await call("file_write", {
      session, path: "in.bin", content: bytes.toString("base64"), encoding: "base64",
    });
    assert.equal(wrote.structuredContent.sha256, digest, JSON.stringify(wrote));
    const seen = await execute(c.client, {
      language: "python", session,
      code: "import hashlib\nhashlib.sha256(open('in.bin', 'rb').read()).hexdigest()",
    });
    assert.equal(seen.structuredContent.result, digest, JSON.stringify(seen));
    const back = await call("file_read", { session, path: "in.bin" });
    assert.equal(crypto.createHash("sha256").update(Buffer.from(back.structuredContent.content,
      "base64")).digest("hex"), digest);
    const missing = await call("file_read", { session, path: "nope.txt" });
    assert.equal(missing.isError, true);
    assert.match(missing.content[0].text, /not_found/);
    const escape = await call("file_read", { session, path: "../etc/passwd" });
    assert.equal(escape.isError, true);
    const closed = await call("session_close", { session });
    assert.equal(closed.isError, false, JSON.stringify(closed));
    await waitFor(`the session's QEMU (${qemu}) to be gone`, () => !fs.existsSync(`/proc/${qemu}`), 30);
    const after = await execute(c.client, { language: "python", code: "1", session });
    assert.equal(after.isError, true, "a closed session's handle");
    // One left open ends with the MCP session (DELETE).
    const left = await call("session_open", {});
    const leftId = left.structuredContent.session;
    await c.transport.terminateSession();
    let ended;
    await waitFor("the session left open to end", async () => {
      ended = (await api("GET", `/v1/sessions/${leftId}`, KEY_A))[1];
      return ended.status === "ended";
    }, 30);
    assert.equal(ended.end_status, "deleted", JSON.stringify(ended));
    assert.match(ended.end_reason, /MCP session ended/, JSON.stringify(ended));
    await waitFor("its VM to be gone", async () => (await serveStatus()).session_pids.length === 0, 30);
    await c.client.close();
  },

  // Who may use a session, and what ends one.
  async sessions() {
    const noKey = await rawPost({}, INIT);
    assert.equal(noKey.status, 401);
    const evil = await rawPost({ Authorization: `Bearer ${KEY_A}`, Host: "evil.example.com" }, INIT);
    assert.equal(evil.status, 403, "a Host that is not this loopback server's");
    const origin = await rawPost({ Authorization: `Bearer ${KEY_A}`, Origin: "http://evil.example.com" },
      INIT);
    assert.equal(origin.status, 403, "a browser's Origin of another site");
    const bad = await rawPost({ Authorization: `Bearer ${KEY_A}`, "MCP-Protocol-Version": "1999-01-01" },
      INIT);
    assert.equal(bad.status, 400, "an unknown MCP-Protocol-Version");
    const noSession = await rawPost({ Authorization: `Bearer ${KEY_A}` },
      { jsonrpc: "2.0", id: 2, method: "tools/list" });
    assert.equal(noSession.status, 400, "a request outside a session");
    const c = await connect(KEY_A);
    const sid = c.transport.sessionId;
    const stolen = await rawPost({ Authorization: `Bearer ${KEY_B}`, "Mcp-Session-Id": sid },
      { jsonrpc: "2.0", id: 2, method: "tools/list" });
    assert.equal(stolen.status, 404, "another tenant's session is unknown to this one");
    const note = await rawPost({ Authorization: `Bearer ${KEY_A}`, "Mcp-Session-Id": sid },
      { jsonrpc: "2.0", method: "notifications/initialized" });
    assert.equal(note.status, 202, "a notification");
    // A client that accepts only JSON: the answer alone as JSON, even with progress asked for.
    const json = await rawPost({ Authorization: `Bearer ${KEY_A}`, "Mcp-Session-Id": sid,
      Accept: "application/json" }, { jsonrpc: "2.0", id: 9, method: "tools/call", params: {
      name: "execute", _meta: { progressToken: 1 },
      arguments: { language: "python", code: "print('a')\nimport time\ntime.sleep(0.5)\n7" } } });
    assert.equal(json.status, 200, json.body);
    assert.match(json.headers["content-type"], /^application\/json/);
    assert.equal(JSON.parse(json.body).result.structuredContent.result, 7, json.body);
    const get = await fetch(`${BASE}/mcp`, { headers: { Authorization: `Bearer ${KEY_A}`,
      "Mcp-Session-Id": sid, Accept: "text/event-stream" } });
    assert.equal(get.status, 405, "no stream of the server's own");
    await c.transport.terminateSession();
    const gone = await rawPost({ Authorization: `Bearer ${KEY_A}`, "Mcp-Session-Id": sid },
      { jsonrpc: "2.0", id: 3, method: "tools/list" });
    assert.equal(gone.status, 404, "a session ended by DELETE");
    await c.client.close();
  },
  // A host tool call the policy holds (catalog "approvals": calc.add needs a person's yes), asked
  // of a client that declared elicitation, on the call's stream: approved, it runs; declined
  // (or accepted unchecked) the program gets policy_denied; a client without elicitation is not
  // asked, and the API's approvals answer it.
  async approvals() {
    // The one approval of calc.add listed by the API, approved there.
    const approveByApi = async () => {
      let listed = [];
      await waitFor("the approval in GET /v1/approvals", async () => {
        const [status, body] = await api("GET", "/v1/approvals", KEY_A);
        assert.equal(status, 200);
        listed = body.approvals.filter((a) => a.tool === "add");
        return listed.length === 1;
      }, 120);
      const r = await fetch(`${BASE}/v1/approvals/${listed[0].id}`, {
        method: "POST", body: JSON.stringify({ decision: "approve" }),
        headers: { Authorization: `Bearer ${KEY_A}`, "Content-Type": "application/json" },
      });
      assert.equal(r.status, 200);
    };
    const code = "const r = await tools.calc.add({a: 2, b: 40});\nr.result";
    const guarded = "let out;\ntry { await tools.calc.add({a: 1, b: 2}); out = 'ran'; } " +
      "catch (e) { out = `${e.code}: ${e.message}`; }\nout";
    const run = (client, c) => execute(client, { language: "javascript", code: c,
      timeout_ms: 120000 });
    const asked = [];
    let answer = { action: "accept", content: { approve: true } };
    const c = await connect(KEY_A, "?catalog=approvals", async (req, extra) => {
      asked.push(req.params);
      return typeof answer === "function" ? answer(extra) : answer;
    });
    const ok = await run(c.client, code);
    assert.notEqual(ok.isError, true, JSON.stringify(ok));
    assert.equal(ok.structuredContent.result, 42);
    assert.equal(asked.length, 1, "asked once");
    assert.match(asked[0].message, /calc/);
    assert.match(asked[0].message, /add/);
    assert.match(asked[0].message, /"a":2/);
    assert.equal(asked[0].requestedSchema.properties.approve.type, "boolean");
    console.log(`APPROVED_BY_CLIENT ${ok.structuredContent.id}`);
    for (const a of [{ action: "decline" }, { action: "cancel" },
      { action: "accept", content: { approve: false } }]) {
      answer = a;
      const denied = await run(c.client, guarded);
      assert.notEqual(denied.isError, true, JSON.stringify(denied));
      assert.match(denied.structuredContent.result, /^policy_denied: .*denied/, JSON.stringify(a));
    }
    assert.equal(asked.length, 4);

    // Answered elsewhere first: the API's answer wins, the client's question is withdrawn
    // (notifications/cancelled aborts the SDK's handler).
    let withdrawn;
    const wasWithdrawn = new Promise((resolve) => { withdrawn = resolve; });
    answer = (extra) => new Promise((resolve) => {
      extra.signal.addEventListener("abort", () => {
        withdrawn();
        resolve({ action: "decline" });
      });
    });
    const raced = run(c.client, code);
    await approveByApi();
    const won = await raced;
    assert.notEqual(won.isError, true, JSON.stringify(won));
    assert.equal(won.structuredContent.result, 42);
    await Promise.race([wasWithdrawn, new Promise((_, reject) => setTimeout(
      () => reject(new Error("the question was not withdrawn")), 30_000))]);
    assert.equal(asked.length, 5);
    await c.transport.terminateSession();
    await c.client.close();

    // Without elicitation: nothing asked of the client; the API lists it, and its answer counts.
    const plain = await connect(KEY_A, "?catalog=approvals");
    const pending = run(plain.client, code);
    await approveByApi();
    const done = await pending;
    assert.notEqual(done.isError, true, JSON.stringify(done));
    assert.equal(done.structuredContent.result, 42);
    await plain.transport.terminateSession();
    await plain.client.close();
  },
};

const only = process.argv[2];
for (const [name, section] of Object.entries(sections)) {
  if (only && only !== name) continue;
  console.log(`-- ${name}`);
  await section();
}
const st = await serveStatus();
assert.equal(st.running, 0, "no execution left running");
console.log("PASS");
