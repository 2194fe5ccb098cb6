// An MCP server made with the official TypeScript SDK (the copy the conformance suite depends on,
// .deps/mcp-clients; its directory in SBX_SDK_DIR) that polls as 2025-11-25 allows: an
// event store (so priming events carry ids and a retry of 300 ms) and a tool that ends its call's
// SSE stream (closeSSEStream) before answering, so the client must resume with a GET and
// Last-Event-ID. For tests/mcp/sdk_polling_test.py.
//
// Listens on 127.0.0.1, an ephemeral port printed as the first line of stdout; then prints a line
// per GET it receives: "GET <Last-Event-ID or ->". Tool: long_task -> text "done after the stream
// was closed" (or "closeSSEStream unavailable": the client did not agree on 2025-11-25).
import http from "node:http";
import { randomUUID } from "node:crypto";

const sdk = process.env.SBX_SDK_DIR;
const { McpServer } = await import(`${sdk}/dist/esm/server/mcp.js`);
const { StreamableHTTPServerTransport } = await import(`${sdk}/dist/esm/server/streamableHttp.js`);
const { InMemoryEventStore } =
  await import(`${sdk}/dist/esm/examples/shared/inMemoryEventStore.js`);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function newServer() {
  const server = new McpServer({ name: "sdk-polling", version: "1.0.0" },
                               { capabilities: { logging: {} } });
  server.registerTool("long_task", { description: "Ends its stream, then answers." },
                      async (extra) => {
    await server.sendLoggingMessage({ level: "info", data: "started" }, extra.sessionId);
    await sleep(200);
    if (!extra.closeSSEStream) {
      return { content: [{ type: "text", text: "closeSSEStream unavailable" }] };
    }
    extra.closeSSEStream();
    await sleep(500); // the answer is stored while the client is away, replayed when it resumes
    await server.sendLoggingMessage({ level: "info", data: "finishing" }, extra.sessionId);
    return { content: [{ type: "text", text: "done after the stream was closed" }] };
  });
  return server;
}

const eventStore = new InMemoryEventStore();
const sessions = new Map();

const httpServer = http.createServer(async (req, res) => {
  if (req.method === "GET") {
    console.log(`GET ${req.headers["last-event-id"] ?? "-"}`);
  }
  const sid = req.headers["mcp-session-id"];
  if (sid !== undefined) {
    const transport = sessions.get(sid);
    if (transport === undefined) {
      res.writeHead(404).end();
      return;
    }
    await transport.handleRequest(req, res);
    return;
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore,
    retryInterval: 300,
    onsessioninitialized: (id) => sessions.set(id, transport),
  });
  await newServer().connect(transport);
  await transport.handleRequest(req, res);
});
httpServer.listen(0, "127.0.0.1", () => console.log(httpServer.address().port));
