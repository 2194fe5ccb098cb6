# Runs inside the VM: prints, calls a host tool, and the last expression is the result.
import sys
print("hello from Python", sys.version.split()[0], "in the sandbox")
total = tools.calc.add({"a": 2, "b": 40})
print("the host's calculator says 2 + 40 =", total["result"])
{"answer": total["result"]}
