#!/usr/bin/env python3
"""A command tool provider for the host tests: one JSON request on stdin, behaviour by tool name.

  echo, do.it  print {"tool": <real name>, "input": <input>}
  fail         write to stderr, exit 1
  garbage      print text that is not JSON
  flood        print 2 MiB of JSON (over the provider's stdout cap)
  slow         sleep input["s"] seconds (default 0.3), then echo the input
  sleep        write "<pid> <grandchild pid>" to input["pidfile"], then sleep for a minute
               (with a grandchild in the same process group): for timeouts and cancellation
With --noread the request is not read at all (the provider must cope with EPIPE).
"""
import json
import os
import subprocess
import sys
import time

if "--noread" in sys.argv:
    json.dump({"noread": True}, sys.stdout)
    sys.exit(0)

req = json.load(sys.stdin)
tool, inp = req["tool"], req["input"]
if tool in ("echo", "do.it"):
    json.dump({"tool": tool, "input": inp}, sys.stdout)
elif tool == "fail":
    print("some noise\nit broke on purpose", file=sys.stderr)
    sys.exit(1)
elif tool == "garbage":
    print("this is not json")
elif tool == "flood":
    sys.stdout.write("[" + "1," * (1 << 20) + "1]")
elif tool == "slow":
    time.sleep(inp.get("s", 0.3) if isinstance(inp, dict) else 0.3)
    json.dump(inp, sys.stdout)
elif tool == "sleep":
    child = subprocess.Popen(["sleep", "60"])
    with open(inp["pidfile"], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(60)
else:
    print(f"no tool {tool}", file=sys.stderr)
    sys.exit(2)
