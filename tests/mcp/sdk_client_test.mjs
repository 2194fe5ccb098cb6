// The official MCP TypeScript SDK's Client against `sandbox mcp` over stdio, with real VMs: the
// SDK (pinned, .deps/mcp-sdk, tests/mcp/fetch-sdk) spawns the server with its
// StdioClientTransport, negotiates, lists the tools and calls execute. Run by
// sdk_client_test.py, which gives it a private runtime dir (SBX_TEST_RUNTIME) and checks that
// nothing is left behind.
//
// Usage: node sdk_client_test.mjs SANDBOX_BINARY TEST
//        (TEST: tools | execute | making | cancel | discovery | serve | sessions |
//        sessions_local | approvals | approvals_serve)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { serveStatus, waitFor } from "./mcp_test_lib.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SDK = path.join(HERE, "..", "..", ".deps", "mcp-sdk", "node_modules", "@modelcontextprotocol",
  "sdk", "dist", "esm");
const { Client } = await import(pathToFileURL(path.join(SDK, "client", "index.js")).href);
const { StdioClientTransport } = await import(pathToFileURL(path.join(SDK, "client", "stdio.js")).href);
const { LATEST_PROTOCOL_VERSION, ElicitRequestSchema } =
  await import(pathToFileURL(path.join(SDK, "types.js")).href);

const [binary, test] = process.argv.slice(2);
const runtime = process.env.SBX_TEST_RUNTIME;
// Under TCG a restore and a run take seconds; the SDK's own default (60 s) is kept for the rest.
const CALL = { timeout: 180_000 };

/** PIDs whose command line mentions the private runtime dir: the VMs of this test. */
function vmPids() {
  const found = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`).includes(runtime)) found.push(Number(entry));
    } catch { /* gone */ }
  }
  return found;
}

/** Children of @pid whose command line has @needle. */
function children(pid, needle) {
  const found = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid && fs.readFileSync(`/proc/${entry}/cmdline`).includes(needle)) {
        found.push(Number(entry));
      }
    } catch { /* gone */ }
  }
  return found;
}

async function connect(extra = [], elicit = null) {
  const transport = new StdioClientTransport({
    command: binary,
    args: ["mcp", ...extra],
    env: { ...process.env }, // the SDK passes only a few variables by default
    stderr: "inherit",
  });
  // With @elicit: a client that declares elicitation and answers it with @elicit(request).
  const client = new Client({ name: "sdk-client-test", version: "1.0.0" },
    elicit ? { capabilities: { elicitation: {} } } : undefined);
  if (elicit) client.setRequestHandler(ElicitRequestSchema, elicit);
  await client.connect(transport);
  return { client, transport };
}

/**
 * Close as the SDK does (stdin ended; SIGTERM after 2 s if the server still runs) and check that
 * the server exited by itself with @code: 0 when nothing was running, 143 when the SIGTERM ended
 * an execution in flight.
 */
async function close({ client, transport }, code = 0) {
  const proc = transport._process; // the SDK forgets it in close(); kept to read its exit
  if (!proc) return; // closed already
  await client.close();
  await waitFor("sandbox mcp to exit", () => proc.exitCode !== null || proc.signalCode !== null, 10);
  assert.equal(proc.signalCode, null, "sandbox mcp exited by itself");
  assert.equal(proc.exitCode, code, "sandbox mcp's exit code");
}

function execute(client, args, options = CALL) {
  return client.callTool({ name: "execute", arguments: args }, undefined, options);
}

async function waitForStatus(what, cond, seconds) {
  let last = await serveStatus();
  const end = Date.now() + seconds * 1000;
  while (!cond(last)) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 200));
    last = await serveStatus();
  }
  return last;
}

const tests = {
  async tools(c) {
    assert.equal(LATEST_PROTOCOL_VERSION, "2025-11-25", "the pinned SDK speaks 2025-11-25");
    assert.equal(c.client.getServerVersion().name, "sandbox");
    assert.ok(c.client.getServerCapabilities().tools, "tools capability");
    assert.match(c.client.getInstructions() ?? "", /execute/);
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((x) => x.name),
      ["execute", "session_open", "session_close", "file_write", "file_read"]);
    const t = tools[0];
    assert.equal(t.name, "execute");
    assert.match(t.description, /last expression/);
    assert.match(t.description, /await tools\.<provider>\.<tool>\(input\)/);
    assert.equal(t.inputSchema.type, "object");
    assert.deepEqual(t.inputSchema.required, ["language", "code"]);
    assert.deepEqual(t.inputSchema.properties.language.enum, ["javascript", "typescript", "python"]);
    for (const p of ["code", "entry", "args", "kwargs", "timeout_ms"]) {
      assert.ok(t.inputSchema.properties[p], `input ${p}`);
    }
    assert.equal(t.outputSchema.type, "object");
    for (const p of ["status", "exit_code", "result", "error", "stdout", "stderr", "duration_ms"]) {
      assert.ok(t.outputSchema.properties[p], `output ${p}`);
      assert.ok(t.outputSchema.required.includes(p), `output ${p} required`);
    }
    assert.equal(t.annotations.readOnlyHint, false);
    assert.equal(t.annotations.openWorldHint, false);
    assert.equal(t.annotations.destructiveHint, false);
    assert.ok(t.inputSchema.properties.session, "execute takes a session");
    // The session tools: annotations as MCP means them, schemas like execute's.
    const hints = {
      session_open: [false, false, false], session_close: [false, true, true],
      file_write: [false, true, true], file_read: [true, false, true],
    };
    for (const s of tools.slice(1)) {
      const [ro, destructive, idempotent] = hints[s.name];
      assert.equal(s.annotations.readOnlyHint, ro, `${s.name} readOnlyHint`);
      assert.equal(s.annotations.destructiveHint, destructive, `${s.name} destructiveHint`);
      assert.equal(s.annotations.idempotentHint, idempotent, `${s.name} idempotentHint`);
      assert.equal(s.annotations.openWorldHint, false, `${s.name} openWorldHint`);
      assert.equal(s.inputSchema.type, "object");
      assert.equal(s.outputSchema.type, "object");
      assert.match(s.description, /session/);
    }
    // A handle this connection did not open is a tool error, whatever it is.
    const none = await c.client.callTool({
      name: "file_read", arguments: { session: "se_0123", path: "a.txt" },
    });
    assert.equal(none.isError, true);
    assert.match(none.content[0].text, /not open/);
    // A refused call is a tool error the model reads, not a protocol error.
    const bad = await execute(c.client, { language: "ruby", code: "1" });
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /language/);
    await assert.rejects(c.client.callTool({ name: "nope", arguments: {} }), /unknown tool/);
  },

  async making(c) {
    // --no-serve with an empty snapshot cache: the first execute makes the snapshot. One sent
    // meanwhile is read once it is there (the reader of stdin does not run inside its own
    // dispatch, host-agent/cli/mcp.c ensure_local), and both are answered.
    const first = execute(c.client, { language: "javascript", code: "6 * 7" });
    await waitFor("the snapshot's making to begin",
      () => fs.readdirSync(process.env.SBX_TEST_SNAPSHOTS).length > 0, 120);
    const second = await execute(c.client, { language: "python", code: "1 + 1" });
    const one = await first;
    assert.notEqual(one.isError, true, JSON.stringify(one));
    assert.equal(one.structuredContent.result, 42, JSON.stringify(one));
    assert.notEqual(second.isError, true, JSON.stringify(second));
    assert.equal(second.structuredContent.result, 2, JSON.stringify(second));
  },

  async execute(c) {
    // JavaScript: the output and the last expression's value; numbers exact both ways.
    const js = await execute(c.client, {
      language: "javascript",
      code: 'console.log("hello from js"); [1, 2, 3].map((x) => x * 2)',
    });
    assert.notEqual(js.isError, true, JSON.stringify(js));
    assert.equal(js.structuredContent.status, "ok");
    assert.equal(js.structuredContent.exit_code, 0);
    assert.deepEqual(js.structuredContent.result, [2, 4, 6]);
    assert.equal(js.structuredContent.stdout, "hello from js\n");
    assert.match(js.content[0].text, /hello from js/);
    assert.match(js.content[0].text, /result: \[2,4,6\]/);
    // Python, with an entry called with args and kwargs.
    const py = await execute(c.client, {
      language: "python",
      code: 'import sys\nprint("py", sys.version_info[0])\ndef add(a, b=0):\n    return a + b\n',
      entry: "add",
      args: [40],
      kwargs: { b: 2 },
    });
    assert.notEqual(py.isError, true, JSON.stringify(py));
    assert.equal(py.structuredContent.result, 42);
    assert.equal(py.structuredContent.stdout, "py 3\n");
    // TypeScript, and two calls in flight at once.
    const [ts, last] = await Promise.all([
      execute(c.client, { language: "typescript", code: "const n: number = 7;\nn * 6" }),
      execute(c.client, { language: "python", code: "sum(range(10))" }),
    ]);
    assert.equal(ts.structuredContent.result, 42, JSON.stringify(ts));
    assert.equal(last.structuredContent.result, 45, JSON.stringify(last));
    // A call that asks for progress gets it while it runs (every 5 s: the seconds so far).
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
    // A program that throws: isError, with the error.
    const thrown = await execute(c.client, {
      language: "javascript",
      code: 'console.log("before");\nthrow new TypeError("bad thing")',
    });
    assert.equal(thrown.isError, true, JSON.stringify(thrown));
    assert.equal(thrown.structuredContent.status, "error");
    assert.equal(thrown.structuredContent.error.type, "TypeError");
    assert.equal(thrown.structuredContent.error.message, "bad thing");
    assert.equal(thrown.structuredContent.stdout, "before\n");
    assert.match(thrown.content[0].text, /TypeError: bad thing/);
    // Python's exception, and a timeout.
    const raised = await execute(c.client, { language: "python", code: "raise ValueError('nope')" });
    assert.equal(raised.isError, true);
    assert.equal(raised.structuredContent.error.type, "ValueError");
    const slow = await execute(c.client, {
      language: "javascript", code: "while (true) {}", timeout_ms: 1500,
    });
    assert.equal(slow.isError, true);
    assert.equal(slow.structuredContent.status, "timeout");
  },

  async cancel(c) {
    const before = vmPids();
    assert.deepEqual(before, [], "no VM before the call");
    const abort = new AbortController();
    const call = execute(c.client, {
      language: "python",
      code: "import time\nprint('started', flush=True)\ntime.sleep(300)",
      timeout_ms: 600000,
    }, { ...CALL, signal: abort.signal });
    // Its VM runs; then the client cancels (notifications/cancelled).
    await waitFor("the execution's VM", () => vmPids().length > 0, 120);
    await new Promise((r) => setTimeout(r, 3000));
    abort.abort("the test cancels");
    await assert.rejects(call);
    // The execution ends: its VM (QEMU and all) is gone, while sandbox mcp runs on.
    await waitFor("the VM to be gone", () => vmPids().length === 0, 30);
    assert.equal(c.transport._process.exitCode, null, "sandbox mcp still runs");
    const after = await execute(c.client, { language: "javascript", code: "1 + 1" });
    assert.equal(after.structuredContent.result, 2, JSON.stringify(after));
    // The client goes away with a call in flight: stdin ends (the execution goes on), the SDK's
    // SIGTERM 2 s later ends it, and sandbox mcp exits 143 with nothing of it left.
    const pending = execute(c.client, {
      language: "javascript", code: "await new Promise((r) => setTimeout(r, 300000))",
      timeout_ms: 600000,
    }).catch((e) => e);
    await waitFor("the second execution's VM", () => vmPids().length > 0, 120);
    await close(c, 143);
    await waitFor("the VM to be gone after the exit", () => vmPids().length === 0, 10);
    // Answered "terminated" on the way out, if the SDK still read it; else the call failed.
    const last = await pending;
    if (!(last instanceof Error)) {
      assert.equal(last.isError, true, JSON.stringify(last));
      assert.equal(last.structuredContent.status, "terminated", JSON.stringify(last));
    }
  },

  // With a catalog (--tools: a command provider and a real MCP server from npm): the discovery
  // tools, then a program that calls both providers' tools.
  async discovery(c) {
    const { tools } = await c.client.listTools();
    assert.deepEqual(tools.map((t) => t.name),
      ["execute", "session_open", "session_close", "file_write", "file_read", "list_providers",
        "search_tools", "get_tool_types"]);
    assert.match(tools[0].description, /search_tools/);
    const text = (r) => {
      assert.notEqual(r.isError, true, JSON.stringify(r));
      return r.content[0].text;
    };
    const call = (name, args) => c.client.callTool({ name, arguments: args });
    const list = text(await call("list_providers", {}));
    assert.match(list, /- calc \(command, 2 tools\): tools\.calc\n/);
    assert.match(list, /- everything \(mcp, \d+ tools\): tools\.everything\n/);
    const found = text(await call("search_tools", { query: "echo" }));
    assert.match(found, /- everything\.echo: tools\.everything\.echo\(input\)/);
    const add = text(await call("search_tools", { query: "numbers", provider: "calc" }));
    assert.match(add, /^1 tool matches/);
    const ts = text(await call("get_tool_types", { tools: ["everything.echo", "calc.add"] }));
    assert.match(ts, /echo\(input: \{ message: string; \}\)/);
    assert.match(ts, /add\(input: /);
    assert.doesNotMatch(ts, /annotatedMessage/);
    const py = text(await call("get_tool_types", { tools: ["everything.echo"], language: "python" }));
    assert.match(py, /def echo\(self, input: /);
    const bad = await call("get_tool_types", { tools: ["everything.nope"] });
    assert.equal(bad.isError, true);
    // What the declarations said, called from a program: an MCP tool and a command tool.
    const run = await execute(c.client, {
      language: "javascript",
      code: 'const e = await tools.everything.echo({message: "hi"});\n' +
        "const s = await tools.calc.add({a: 2, b: 40});\n({echo: e[0].text, sum: s})",
    });
    assert.notEqual(run.isError, true, JSON.stringify(run));
    assert.equal(run.structuredContent.result.echo, "Echo: hi");
    assert.deepEqual(run.structuredContent.result.sum, { result: 42 });
    // The execution's own MCP server ends with it (freed just after the answer); the one
    // started for the listing runs until sandbox mcp ends, and not longer.
    const mine = () => children(c.transport.pid, "server-everything");
    await waitFor("the execution's MCP server to end", () => mine().length === 1, 10);
    const listing = mine();
    await close(c);
    await waitFor("the listing's MCP server to end", () => !fs.existsSync(`/proc/${listing[0]}`), 10);
  },

  // Through `sandbox serve` (sdk_client_test.py started it, --pool 1): the pool's VMs run the
  // executions, and a cancel ends the server's execution and its VM.
  async serve(c) {
    const before = await waitForStatus("a warm VM", (st) => st.ready >= 1, 180);
    const js = await execute(c.client, {
      language: "javascript", code: 'console.log("via serve"); 40 + 2',
    });
    assert.equal(js.structuredContent.result, 42, JSON.stringify(js));
    assert.equal(js.structuredContent.stdout, "via serve\n");
    const after = await serveStatus();
    assert.equal(after.claimed_total, before.claimed_total + 1, "the pool's VM ran it");
    // A call that asks for progress gets the output as it comes through the server too.
    const progress = [];
    const live = await execute(c.client, {
      language: "javascript",
      code: 'console.log("live via serve");\nawait new Promise((r) => setTimeout(r, 1500)); 7',
    }, { ...CALL, onprogress: (p) => progress.push(p) });
    assert.equal(live.structuredContent.result, 7, JSON.stringify(live));
    assert.equal(live.structuredContent.stdout, "live via serve\n");
    assert.equal(progress[0]?.message, "live via serve\n", JSON.stringify(progress));
    const py = await execute(c.client, { language: "python", code: "raise KeyError('k')" });
    assert.equal(py.isError, true);
    assert.equal(py.structuredContent.error.type, "KeyError");
    // A cancel: the server's execution ends, its QEMU is killed.
    const abort = new AbortController();
    const call = execute(c.client, {
      language: "python", code: "import time\ntime.sleep(300)", timeout_ms: 600000,
    }, { ...CALL, signal: abort.signal });
    const running = await waitForStatus("the execution", (st) => st.running === 1, 120);
    const [pid] = running.running_pids;
    await new Promise((r) => setTimeout(r, 1000));
    abort.abort("the test cancels");
    await assert.rejects(call);
    await waitForStatus("the execution's end", (st) => st.running === 0, 30);
    await waitFor(`its QEMU (${pid}) to be gone`, () => !fs.existsSync(`/proc/${pid}`), 30);
    const again = await execute(c.client, { language: "javascript", code: "[1, 2].length" });
    assert.equal(again.structuredContent.result, 2, JSON.stringify(again));
  },  // Sessions through `sandbox serve` (sdk_client_test.py started it, --pool 1), or
  // (sessions_local) of VMs `sandbox mcp` restores itself: state kept across executions in both
  // languages, files in and out (binary, digests compared), errors for a bad path and an
  // unknown session, a close, sessions ended by their idle timeout and their lifetime (asked
  // for at the open: the server's clock both ways), and a session left open ended with the
  // connection (its QEMU gone).
  async sessions(c, local = false) {
    // The QEMUs of the open sessions: the server's status says; without it, every VM of the
    // test's runtime dir is one when no execution runs.
    const qemus = () => vmPids().filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0].includes("qemu-system");
      } catch { return false; } // gone
    });
    const sessionVms = async () => (local ? qemus() : (await serveStatus()).session_pids);
    if (!local) await waitForStatus("a warm VM", (st) => st.ready >= 1, 180);
    const call = (name, args) => c.client.callTool({ name, arguments: args }, undefined, CALL);
    const opened = await call("session_open", {});
    assert.equal(opened.isError, false, JSON.stringify(opened));
    const session = opened.structuredContent.session;
    assert.match(session, /^[A-Za-z0-9_.-]+$/);
    // The server's defaults, both ways (sessions of sandbox mcp's own keep the server's clock).
    assert.equal(opened.structuredContent.idle_timeout_s, 600, JSON.stringify(opened));
    assert.equal(opened.structuredContent.max_lifetime_s, 3600, JSON.stringify(opened));
    if (local) assert.match(session, /^lo_/, "a session of sandbox mcp's own");
    const vms = await sessionVms();
    assert.equal(vms.length, 1, "one VM holds the session");
    const [qemu] = vms;
    // State across executions, Python and JavaScript (each its own).
    const py1 = await execute(c.client, { language: "python", code: "x = 41", session });
    assert.equal(py1.isError, false, JSON.stringify(py1));
    const py2 = await execute(c.client, { language: "python", code: "x + 1", session });
    assert.equal(py2.structuredContent.result, 42, JSON.stringify(py2));
    const js1 = await execute(c.client, { language: "javascript", code: "let x = 41", session });
    assert.equal(js1.isError, false, JSON.stringify(js1));
    const js2 = await execute(c.client, { language: "javascript", code: "x + 1", session });
    assert.equal(js2.structuredContent.result, 42, JSON.stringify(js2));
    // Without the session: a fresh VM, no x.
    const fresh = await execute(c.client, { language: "python", code: "'x' in globals()" });
    assert.equal(fresh.structuredContent.result, false, JSON.stringify(fresh));

    // A binary file in, read by a program, and back out: the same bytes.
    const bytes = crypto.randomBytes(70000);
    bytes[0] = 0; bytes[1] = 0xff; // not text
    const digest = crypto.createHash("sha256").update(bytes).digest("hex");
    const wrote = await call("file_write", {
      session, path: "data/in.bin", content: bytes.toString("base64"), encoding: "base64",
    });
    assert.equal(wrote.isError, false, JSON.stringify(wrote));
    assert.equal(wrote.structuredContent.size, bytes.length);
    assert.equal(wrote.structuredContent.sha256, digest);
    const seen = await execute(c.client, {
      language: "python", session,
      code: "import hashlib\nd = open('data/in.bin', 'rb').read()\nopen('out.txt', 'w', encoding='utf-8').write('h\\u00e9 ' + str(len(d)))\nhashlib.sha256(d).hexdigest()",
    });
    assert.equal(seen.structuredContent.result, digest, JSON.stringify(seen));
    const back = await call("file_read", { session, path: "data/in.bin" });
    assert.equal(back.isError, false);
    assert.equal(back.structuredContent.encoding, "base64");
    const got = Buffer.from(back.structuredContent.content, "base64");
    assert.equal(crypto.createHash("sha256").update(got).digest("hex"), digest);
    assert.equal(back.structuredContent.sha256, digest);
    const text = await call("file_read", { session, path: "out.txt" });
    assert.equal(text.structuredContent.encoding, "utf-8");
    assert.equal(text.structuredContent.content, `hé ${bytes.length}`);

    // Errors the model reads: a path out of the workspace, a missing file, an unknown session.
    const bad = await call("file_read", { session, path: "../etc/passwd" });
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /path/);
    const missing = await call("file_read", { session, path: "nope.txt" });
    assert.equal(missing.isError, true);
    assert.match(missing.content[0].text, /not_found/);
    const unknown = await execute(c.client, { language: "python", code: "1", session: "se_unknown" });
    assert.equal(unknown.isError, true);
    assert.match(unknown.content[0].text, /not open/);
    const unknownFile = await call("file_write", { session: "se_unknown", path: "a", content: "" });
    assert.equal(unknownFile.isError, true);

    // Close: the VM is gone, the handle no longer works.
    const closed = await call("session_close", { session });
    assert.equal(closed.isError, false, JSON.stringify(closed));
    assert.equal(closed.structuredContent.closed, true);
    await waitFor(`the session's QEMU (${qemu}) to be gone`, () => !fs.existsSync(`/proc/${qemu}`), 30);
    const after = await execute(c.client, { language: "python", code: "x", session });
    assert.equal(after.isError, true);

    // An execution that ends its runtime ends the session: the server says so, and the handle
    // is forgotten.
    const short = (await call("session_open", {})).structuredContent.session;
    const exit = await execute(c.client, {
      language: "python", code: "import sys\nsys.exit(0)", session: short,
    });
    assert.equal(exit.structuredContent.status, "ok", JSON.stringify(exit));
    const ended = await call("file_read", { session: short, path: "x" });
    assert.equal(ended.isError, true);
    assert.match(ended.content[0].text, /ended/);
    const forgotten = await call("file_read", { session: short, path: "x" });
    assert.match(forgotten.content[0].text, /not open/);

    // A session nobody uses ends after its idle timeout, one open too long after its lifetime,
    // as the server's do: its VM killed, the next call told it ended and why, then forgotten.
    const expiring = async (limits, why) => {
      const before = new Set(await sessionVms());
      const o = await call("session_open", limits);
      assert.equal(o.isError, false, JSON.stringify(o));
      for (const [k, v] of Object.entries(limits)) assert.equal(o.structuredContent[k], v);
      const s = o.structuredContent.session;
      const vms = (await sessionVms()).filter((pid) => !before.has(pid));
      assert.equal(vms.length, 1, "one VM holds the session");
      const used = await execute(c.client, { language: "python", code: "y = 1", session: s });
      assert.equal(used.isError, false, JSON.stringify(used));
      await waitFor(`the expired session's QEMU (${vms[0]}) to be gone`,
                    () => !fs.existsSync(`/proc/${vms[0]}`), 120);
      const late = await call("file_read", { session: s, path: "x" });
      assert.equal(late.isError, true, JSON.stringify(late));
      assert.match(late.content[0].text, /^error \(ended\): the session has ended \(expired\): /);
      assert.match(late.content[0].text, why);
      const gone = await execute(c.client, { language: "python", code: "y", session: s });
      assert.match(gone.content[0].text, /not open/, "its handle forgotten");
    };
    await expiring({ idle_timeout_s: 2 }, /idle for 2 s \(its idle timeout\)/);
    await expiring({ max_lifetime_s: 30 }, /open for 30 s \(its maximum lifetime\)/);

    // A session left open is ended when the connection ends (close() below).
    const left = await call("session_open", {});
    assert.equal(left.isError, false, JSON.stringify(left));
    const open = await sessionVms();
    assert.equal(open.length, 1);
    c.leftQemu = open[0];
  },

  async sessions_local(c) {
    await tests.sessions(c, true);
  },

  // A host tool call the policy holds (SBX_TEST_CATALOG: calc.add needs approval), in VMs
  // restored here (--no-serve): asked of the client (elicitation) and decided by its answer;
  // a client without elicitation has nobody to ask here: denied at once. With @serve, through
  // the test's `sandbox serve`: the server's approvals, asked of the client as well; a client
  // without elicitation waits for `sandbox approve ID`.
  async approvals(c, serve = false) {
    const code = "const r = await tools.calc.add({a: 2, b: 40});\nr.result";
    const guarded = "let out;\ntry { await tools.calc.add({a: 1, b: 2}); out = 'ran'; } " +
      "catch (e) { out = `${e.code}: ${e.message}`; }\nout";
    const run = (client, text) => client.callTool({ name: "execute", arguments: {
      language: "javascript", code: text, timeout_ms: 120000 } }, undefined, CALL);
    const ok = await run(c.client, code);
    assert.notEqual(ok.isError, true, JSON.stringify(ok));
    assert.equal(ok.structuredContent.result, 42);
    assert.equal(c.asked.length, 1, "asked once");
    assert.match(c.asked[0].message, /add/);
    assert.match(c.asked[0].message, /calc/);
    assert.equal(c.asked[0].requestedSchema.properties.approve.type, "boolean");
    console.log(`APPROVED_BY_CLIENT ${ok.structuredContent.id}`);
    for (const a of [{ action: "decline" }, { action: "accept", content: { approve: false } }]) {
      c.answer = a;
      const denied = await run(c.client, guarded);
      assert.notEqual(denied.isError, true, JSON.stringify(denied));
      assert.match(denied.structuredContent.result, /^policy_denied: .*denied/, JSON.stringify(a));
    }
    assert.equal(c.asked.length, 3);
    if (serve) {
      const st = await serveStatus();
      assert.ok(st.claimed_total >= 3, `the runs were the server's: ${JSON.stringify(st)}`);
      // Answered elsewhere (`sandbox approve`) while the client has not answered: the server
      // tells the run's stream the approval stopped waiting, so the question is withdrawn
      // (notifications/cancelled: the SDK aborts the handler) while the run goes on: before
      // the question of the program's next held call, which comes after it on that stream.
      let release;
      c.answer = new Promise((resolve) => { release = resolve; });
      const twice = "const r = await tools.calc.add({a: 2, b: 40});\n" +
        "const s = await tools.calc.add({a: 1, b: 1});\nr.result + s.result";
      const waiting = run(c.client, twice);
      await waitFor("the fourth question", () => c.asked.length === 4, 120);
      const listed = JSON.parse(execFileSync(binary, ["approvals", "--json"], { encoding: "utf8" }))
        .filter((a) => a.tool === "add");
      assert.equal(listed.length, 1, JSON.stringify(listed));
      assert.equal(c.signals[3].aborted, false, "asked, not yet withdrawn");
      c.answer = { action: "accept", content: { approve: true } }; // the next question's
      execFileSync(binary, ["approve", listed[0].id]);
      const done = await waiting;
      assert.equal(done.structuredContent.result, 44, JSON.stringify(done));
      assert.equal(c.asked.length, 5, "the second call was asked");
      assert.equal(c.withdrawnBefore[4], 1, "the first question withdrawn before the second came");
      release({ action: "decline" }); // late: ignored
    }
    const plain = await connect(["--tools", process.env.SBX_TEST_CATALOG,
      ...(serve ? [] : ["--no-serve"])]);
    try {
      if (!serve) {
        const refused = await run(plain.client, guarded);
        assert.match(refused.structuredContent.result, /^policy_denied: /,
          JSON.stringify(refused));
        return;
      }
      const waiting = run(plain.client, code);
      let listed = [];
      await waitFor("the approval in `sandbox approvals`", () => {
        listed = JSON.parse(execFileSync(binary, ["approvals", "--json"], { encoding: "utf8" }))
          .filter((a) => a.tool === "add");
        return listed.length === 1;
      }, 120);
      execFileSync(binary, ["approve", listed[0].id]);
      const done = await waiting;
      assert.notEqual(done.isError, true, JSON.stringify(done));
      assert.equal(done.structuredContent.result, 42);
    } finally {
      await close(plain);
    }
  },

  async approvals_serve(c) {
    await tests.approvals(c, true);
  },
};

if (!tests[test] || !binary || !runtime) {
  console.error(`usage: SBX_TEST_RUNTIME=DIR node sdk_client_test.mjs SANDBOX {${Object.keys(tests).join("|")}}`);
  process.exit(2);
}
let c;
if (test.startsWith("approvals")) {
  const asked = [];
  const signals = []; // each question's: aborted when the server withdraws it
  const state = { answer: { action: "accept", content: { approve: true } } };
  const where = test === "approvals" ? ["--no-serve"] : [];
  const withdrawnBefore = []; // for each question: how many earlier ones were withdrawn then
  c = await connect(["--tools", process.env.SBX_TEST_CATALOG, ...where], async (req, extra) => {
    withdrawnBefore.push(signals.filter((sig) => sig.aborted).length);
    asked.push(req.params);
    signals.push(extra.signal);
    return state.answer;
  });
  c.asked = asked;
  c.signals = signals;
  c.withdrawnBefore = withdrawnBefore;
  Object.defineProperty(c, "answer", { set: (v) => { state.answer = v; } });
} else {
  c = await connect(test === "discovery" ? ["--tools", process.env.SBX_TEST_CATALOG]
    : test === "making" ? ["--no-serve"] : []);
}
try {
  await tests[test](c);
} finally {
  await close(c);
}
if (test === "sessions") {
  // sandbox mcp ended the session it had open as it exited: the server holds none, its VM is gone.
  const st = await serveStatus();
  assert.equal(st.sessions, 0, "the session left open was ended with the connection");
}
if (test.startsWith("sessions")) {
  await waitFor(`the left session's QEMU (${c.leftQemu}) to be gone`,
    () => !fs.existsSync(`/proc/${c.leftQemu}`), 30);
}
console.log("PASS");
