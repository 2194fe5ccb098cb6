#!/usr/bin/env python3
"""A replay finds what was broken in a record (issue 16, point 5; docs/replay-corpus.md).

Usage: broken_test.py SANDBOX tool_result|snapshot

tool_result: a program that prints a tool's result is recorded and replayed (identical: the
  record is sound); then one byte of that recorded result is changed in sandbox.db (the
  tool_calls table's result_json) and `sandbox replay` must exit 1, diverged, with a divergence
  that names the output (stdout, where the result was printed) or the tool call.
snapshot: a program is recorded; its snapshot is copied into a private cache (never the shared
  build cache), the replay pointed at the copy (SANDBOX_SNAPSHOT_DIR) is identical; then one byte
  of the copy's state.bin is changed and the replay must refuse (exit 2, cannot_replay) or
  diverge (exit 1), saying so.

Runs in a private scratch dir (state, runtime dir, the private cache); PIDs tracked; nothing left.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_test import TOOLS, Corpus  # noqa: E402

PROGRAM = """// Prints a tool's result: a changed byte in the recorded result changes this output.
const r = await tools.corpus.echo({ word: 'replayed', n: 12345 });
console.log('the tool said', r.word, r.n);
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def record(c):
    path = os.path.join(c.scratch, "prints_tool_result.js")
    with open(path, "w") as f:
        f.write(PROGRAM)
    rc, report = c.call_json(["run", "--json", "--no-serve", "--tools", TOOLS, path], "record")
    check(rc == 0 and report.get("status") == "ok" and
          report.get("stdout") == "the tool said replayed 12345\n",
          f"the recorded run: rc {rc}, {json.dumps(report)[:1500]}")
    return report["id"]


def replay(c, rid, env_extra=None):
    """`sandbox replay --json ID`: (rc, the object printed, the text)."""
    saved = c.env
    c.env = dict(c.env, **(env_extra or {}))
    try:
        rc, out, err = c.call(["replay", "--json", rid])
    finally:
        c.env = saved
    try:
        return rc, json.loads(out), out + err
    except ValueError:
        return rc, {}, out + err


def broken_tool_result(c):
    rid = record(c)
    rc, v, text = replay(c, rid)
    if not check(rc == 0 and v.get("verdict") == "identical",
                 f"the untouched record replays identical: rc {rc} {text[-1500:]!r}"):
        return
    db = sqlite3.connect(os.path.join(c.state, "sandbox.db"))
    with db:
        rows = db.execute("SELECT seq, result_json FROM tool_calls WHERE execution_id = ?",
                          (rid,)).fetchall()
        check(len(rows) == 1 and "replayed" in (rows[0][1] or ""),
              f"one recorded call whose result holds the word: {rows}")
        if not rows:
            return
        seq, result = rows[0]
        broken = result.replace("replayed", "replayes", 1)  # one byte: d -> s
        db.execute("UPDATE tool_calls SET result_json = ? WHERE execution_id = ? AND seq = ?",
                   (broken, rid, seq))
    db.close()
    rc, v, text = replay(c, rid)
    print(f"the changed record's replay: exit {rc}: {text.strip()[:800]}")
    d = v.get("divergence") or {}
    check(rc == 1 and v.get("verdict") == "diverged",
          f"a changed tool result: exit 1, diverged: rc {rc} {text[-1500:]!r}")
    where = (str(d.get("what", "")) + " " + str(d.get("where", ""))).lower()
    check("stdout" in where or "tool" in where,
          f"the divergence names stdout or the tool call: {d}")
    if "stdout" in where:
        check("replayes" in str(d.get("replayed", "")) or "replayed" in str(d.get("recorded", "")),
              f"the divergence shows the output that differs: {d}")


def snapshot_dir(c):
    rc, out, err = c.call(["paths"])
    return json.loads(out)["snapshot_dir"] if rc == 0 else None


def copy_sparse(src, dst):
    """A file copied with its holes (the snapshot's ram is sparse) and its mode."""
    subprocess.run(["cp", "--sparse=always", "--preserve=mode", src, dst], check=True,
                   timeout=120)


def broken_snapshot(c):
    rid = record(c)
    rc, out, err = c.call(["records", "show", rid, "--json"])
    key = json.loads(out).get("snapshot_key") if rc == 0 else None
    shared = snapshot_dir(c)
    if not check(key and shared and os.path.isdir(os.path.join(shared, key)),
                 f"the record names its snapshot ({key}) in the cache ({shared})"):
        return
    private = os.path.join(c.scratch, "snapshots")
    os.mkdir(private, 0o700)
    # A copy of the one snapshot, sparse like the original; the shared cache is only read.
    copy = os.path.join(private, key)
    shutil.copytree(os.path.join(shared, key), copy, copy_function=copy_sparse)
    env = {"SANDBOX_SNAPSHOT_DIR": private}
    rc, v, text = replay(c, rid, env)
    if not check(rc == 0 and v.get("verdict") == "identical",
                 f"the replay on an intact copy of the snapshot is identical: rc {rc} "
                 f"{text[-1500:]!r}"):
        return
    state = os.path.join(copy, "state.bin")
    with open(state, "r+b") as f:
        f.seek(4096 + 17)
        byte = f.read(1)
        f.seek(4096 + 17)
        f.write(bytes([byte[0] ^ 0x01]))
    rc, v, text = replay(c, rid, env)
    print(f"the replay on the changed snapshot: exit {rc}: {text.strip()[:800]}")
    check((rc == 2 and v.get("verdict") == "cannot_replay") or
          (rc == 1 and v.get("verdict") == "diverged"),
          f"a changed snapshot: exit 2 (cannot replay) or 1 (diverged): rc {rc} {text[-1500:]!r}")
    check("snapshot" in text or "state.bin" in text,
          f"the message names the snapshot: {text[-1500:]!r}")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("tool_result", "snapshot"):
        print(__doc__)
        return 2
    image = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(os.path.dirname(
        os.path.dirname(os.path.abspath(sys.argv[1]))), "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print("skipped: the guest image is not built")
        return 77
    c = Corpus(os.path.abspath(sys.argv[1]), by_hand=False)
    try:
        (broken_tool_result if sys.argv[2] == "tool_result" else broken_snapshot)(c)
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        c.close()
    for f in failures + c.problems:
        print("FAIL:", f)
    print("ok" if not failures + c.problems else f"{len(failures + c.problems)} failed")
    return 1 if failures or c.problems else 0


if __name__ == "__main__":
    sys.exit(main())
