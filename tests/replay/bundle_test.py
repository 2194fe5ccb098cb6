#!/usr/bin/env python3
"""A bundle replayed on "another machine" (docs/service.md, "Bundles"). Usage: bundle_test.py SANDBOX

`sandbox run` of a program that draws random numbers and reads the clock, in a temporary state
directory (the build tree's snapshot cache); `sandbox records export ID FILE` writes its bundle;
then, in a fresh empty SANDBOX_STATE_DIR with SANDBOX_SNAPSHOT_DIR pointed at an empty cache
(neither the original's database nor its snapshots are there), `sandbox replay --bundle FILE`
must exit 0 and print `identical`, and leave no unpacked bundle behind in the state directory.
Exit 77 without the guest image."""
import json
import os
import subprocess
import sys
import tempfile

SANDBOX = sys.argv[1]
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(SANDBOX)))
failures = []

PROGRAM = """import random, time
print(random.random(), random.randrange(10**9))
print(time.time() > 0)
"""


def check(cond, what, got=None):
    if not cond:
        failures.append(what)
        print("FAIL:", what, "" if got is None else repr(got)[:2000], flush=True)


def sandbox(env, *args, timeout=300):
    p = subprocess.run([SANDBOX, *args], capture_output=True, env=env, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def main():
    if not os.path.exists(os.path.join(BUILD, "image", "manifest.json")) and \
            "SANDBOX_IMAGE_DIR" not in os.environ:
        print("skip: no guest image (guest-image/build-image)")
        return 77
    with tempfile.TemporaryDirectory(prefix="sbx-bundle-vm-") as tmp:
        prog = os.path.join(tmp, "prog.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        here = dict(os.environ, SANDBOX_STATE_DIR=os.path.join(tmp, "state-a"))
        rc, out, err = sandbox(here, "run", "--no-serve", prog)
        check(rc == 0, f"sandbox run: rc {rc}", err)
        rc, out, err = sandbox(here, "records", "list", "--json")
        rows = json.loads(out) if rc == 0 else []
        check(len(rows) == 1, "one record", rows)
        if failures:
            return 1
        rid = rows[0]["id"]
        bundle = os.path.join(tmp, "exec.bundle")
        rc, out, err = sandbox(here, "records", "export", rid, bundle)
        check(rc == 0 and f"record {rid} exported to {bundle}" in out,
              f"records export: rc {rc}", out + err)

        # "Another machine": a fresh state directory and an empty snapshot cache.
        fresh = os.path.join(tmp, "state-b")
        cache = os.path.join(tmp, "empty-cache")
        os.mkdir(fresh, 0o700)
        os.mkdir(cache, 0o700)
        there = dict(os.environ, SANDBOX_STATE_DIR=fresh, SANDBOX_SNAPSHOT_DIR=cache)
        rc, out, err = sandbox(there, "replay", "--bundle", bundle)
        check(rc == 0, f"replay --bundle: rc {rc}", out + err)
        check("identical" in out, "replay --bundle prints identical", out)
        left = [n for n in os.listdir(fresh) if n.startswith("bundle-")]
        check(not left, "nothing unpacked is left in the state directory", left)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
