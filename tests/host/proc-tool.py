#!/usr/bin/env python3
"""A command tool for test-tool-procs.c: how a tool process starts. One JSON request on stdin.

  env     print {"env": <the process's environment>}
  limits  print {"core": [soft, hard], "nofile": [soft, hard]} (-1: unlimited)
  stamp   append "start <id> <t>" to input["log"], sleep input["s"] seconds, append
          "end <id> <t>" (t: CLOCK_MONOTONIC, the same clock in every process), print {"id": id}
"""
import json
import os
import resource
import sys
import time


def log(path, what, ident):
    with open(path, "a") as f:
        f.write(f"{what} {ident} {time.monotonic():.6f}\n")


req = json.load(sys.stdin)
tool, inp = req["tool"], req["input"]
if tool == "env":
    json.dump({"env": dict(os.environ)}, sys.stdout)
elif tool == "limits":
    json.dump({"core": resource.getrlimit(resource.RLIMIT_CORE),
               "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}, sys.stdout)
elif tool == "stamp":
    log(inp["log"], "start", inp["id"])
    time.sleep(inp.get("s", 0.2))
    log(inp["log"], "end", inp["id"])
    json.dump({"id": inp["id"]}, sys.stdout)
else:
    print(f"no tool {tool}", file=sys.stderr)
    sys.exit(2)
