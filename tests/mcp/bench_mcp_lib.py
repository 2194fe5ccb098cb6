"""The MCP server's figure for scripts/bench (`--mcp-only`): what an agent reads to find one host
tool and its types in code mode (`sandbox mcp --tools`: tools/list, list_providers, search_tools,
get_tool_types), against what it reads when it gets every tool's schema directly (the MCP
servers' own tools/list), for the test catalog: @modelcontextprotocol/server-everything and
server-memory (.deps/mcp-servers, tests/mcp/fetch-servers). Bytes of the JSON-RPC answers as
they arrive, the result member of each; the call of the tool itself costs about the same both
ways and is left out. No VM runs.
"""
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SERVERS = os.path.join(TOP, ".deps", "mcp-servers", "node_modules", "@modelcontextprotocol")
CATALOG = {
    "everything": ["node", os.path.join(SERVERS, "server-everything", "dist", "index.js"),
                   "stdio"],
    "memory": ["node", os.path.join(SERVERS, "server-memory", "dist", "index.js")],
}
# An answer this bench waits for: the servers start in a second or two.
ANSWER_TIMEOUT_S = 60


class Peer:
    """An MCP server on stdio, as a client sees it: requests out, answers' text in."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def request(self, method, params=None):
        """The answer's result as its JSON text (what the agent reads), and parsed."""
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{method}: the server ended")
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                result = answer["result"]
                return json.dumps(result, separators=(",", ":")), result

    def start(self):
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()
        return self

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its PID
            self.proc.wait()


def mcp_token_figures(sandbox):
    """Print the bytes both ways and their ratio; returns (code mode, direct)."""
    direct = 0
    for argv in CATALOG.values():
        peer = Peer(argv).start()
        text, result = peer.request("tools/list")
        direct += len(text.encode())
        peer.close()
    with tempfile.TemporaryDirectory(prefix="sbx-bench-mcp-") as tmp:
        path = os.path.join(tmp, "tools.json")
        with open(path, "w") as f:
            json.dump({"providers": {n: {"kind": "mcp", "command": a}
                                     for n, a in CATALOG.items()}}, f)
        peer = Peer([sandbox, "mcp", "--tools", path]).start()
        steps = [("tools/list", None),
                 ("tools/call", {"name": "list_providers", "arguments": {}}),
                 ("tools/call", {"name": "search_tools", "arguments": {"query": "echo"}}),
                 ("tools/call", {"name": "get_tool_types",
                                 "arguments": {"tools": ["everything.echo"]}})]
        sizes = []
        for method, params in steps:
            text, _ = peer.request(method, params)
            sizes.append((params or {}).get("name", method) + f" {len(text.encode())}")
        code = sum(int(x.split()[-1]) for x in sizes)
        peer.close()
    print("MCP code mode: bytes an agent reads to find one tool and its types "
          "(the test catalog: server-everything + server-memory)")
    print(f"  code mode ({', '.join(sizes)})")
    print(f"  code mode in all                                                       "
          f"{code:>8} bytes")
    print(f"  every tool's schema (the servers' tools/list)                          "
          f"{direct:>8} bytes")
    print(f"  ratio direct / code mode                                               "
          f"{direct / code:>8.1f}")
    return code, direct
