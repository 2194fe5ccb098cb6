# Runs inside the VM: prints, calls host tools (a command and an MCP server); the last
# expression is the result.
import json
import sys
print("hello from Python", sys.version.split()[0], "in the sandbox")
total = tools.calc.add({"a": 2, "b": 40})
print("the host's calculator says 2 + 40 =", total["result"])
# The knowledge-graph MCP server (npm @modelcontextprotocol/server-memory) runs on the host.
tools.memory.create_entities({"entities": [{"name": "sandbox", "entityType": "program", "observations": []}]})
tools.memory.add_observations({"observations": [{"entityName": "sandbox", "contents": ["ran hello.py"]}]})
node = json.loads(tools.memory.open_nodes({"names": ["sandbox"]})[0]["text"])["entities"][0]
print("the MCP memory server remembers:", "; ".join(node["observations"][-2:]))
{"answer": total["result"], "observations": len(node["observations"])}
