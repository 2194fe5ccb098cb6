# A tool error nobody catches: status error, the ToolError's message is the run's error.
import uuid

print("calling with", uuid.uuid4())
tools.corpus.fail({"why": "uncaught"})
print("not reached")
