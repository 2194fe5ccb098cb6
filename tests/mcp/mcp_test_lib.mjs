// What the MCP tests driven by node share (sdk_client_test.mjs, sdk_http_test.mjs): a bounded
// wait, and `sandbox serve`'s status over its Unix socket (SBX_TEST_SERVE_SOCKET).
import net from "node:net";

/** Wait until @cond() (a value or a promise of one) is true; fail after @seconds. */
export async function waitFor(what, cond, seconds) {
  const end = Date.now() + seconds * 1000;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `sandbox serve`'s status (docs/pool.md, "Client protocol"): one frame each way. */
export function serveStatus() {
  return new Promise((resolve, reject) => {
    const sock = net.connect(process.env.SBX_TEST_SERVE_SOCKET);
    let buf = Buffer.alloc(0);
    sock.setTimeout(5000, () => sock.destroy(new Error("no status from sandbox serve")));
    sock.on("error", reject);
    sock.on("connect", () => {
      const body = Buffer.from(JSON.stringify({ type: "status" }));
      const len = Buffer.alloc(4);
      len.writeUInt32BE(body.length);
      sock.write(Buffer.concat([len, body]));
    });
    sock.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
        sock.destroy();
        resolve(JSON.parse(buf.subarray(4, 4 + buf.readUInt32BE(0)).toString()));
      }
    });
  });
}
