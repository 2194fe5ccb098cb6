#!/usr/bin/env python3
"""`sandbox` command line without a VM: usage errors (exit 2), sandbox failures before a VM
exists (exit 125, and the --json report), help. Usage: test-cli.py SANDBOX_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

SANDBOX = sys.argv[1]
failures = []


def run(*args, stdin=b"", env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([SANDBOX, *args], input=stdin, capture_output=True, env=e, timeout=60)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def expect(args, rc, text=None, **kw):
    got_rc, out, err = run(*args, **kw)
    if got_rc != rc or (text is not None and text not in out + err):
        failures.append(f"sandbox {' '.join(args)}: rc {got_rc} (want {rc}), "
                        f"wanted {text!r} in:\n{out}{err}")
    return out


with tempfile.TemporaryDirectory(prefix="sbx-cli-") as tmp:
    js = os.path.join(tmp, "p.js")
    noext = os.path.join(tmp, "prog")
    binary = os.path.join(tmp, "bin.py")
    bad_catalog = os.path.join(tmp, "tools.json")
    for path, data in [(js, b"1"), (noext, b"1"), (binary, b"\xff\xfe"),
                       (bad_catalog, b'{"providers": {"p": {"kind": "ftp"}}}')]:
        with open(path, "wb") as f:
            f.write(data)
    no_image = {"SANDBOX_IMAGE_DIR": os.path.join(tmp, "no-image")}

    expect([], 2, "Usage: sandbox")
    expect(["--help"], 0, "run")
    expect(["frobnicate"], 2, "unknown verb")
    expect(["run", "--help"], 0, "--output-limit")
    expect(["run"], 2, "expected one program file")
    expect(["run", js, js], 2, "expected one program file")
    expect(["run", "--bogus", js], 2, "Unknown option")
    expect(["run", noext], 2, "cannot tell the language")
    expect(["run", "-"], 2, "cannot tell the language")
    expect(["run", "--lang", "ruby", js], 2, "unknown language")
    expect(["run", os.path.join(tmp, "missing.js")], 2, "No such file")
    expect(["run", binary], 2, "not UTF-8")
    for t in ["0", "-1", "abc", "1e9", ""]:
        expect(["run", "--timeout", t, js], 2, "--timeout")
    for o in ["0", "2G", "10X", "-5", "K"]:
        expect(["run", "--output-limit", o, js], 2, "--output-limit")
    expect(["run", "--tools", bad_catalog, js], 2, 'providers.p.kind: unsupported provider kind')
    expect(["run", "--tools", os.path.join(tmp, "none.json"), js], 2, "none.json")

    # The sandbox itself fails (no image): 125, and --json still prints one object.
    expect(["run", js], 125, "", env=no_image)
    out = expect(["run", "--json", "--lang", "python", "-"], 125, stdin=b"print(1)",
                 env=no_image)
    try:
        report = json.loads(out)
        for key in ["status", "exit_code", "result", "error", "stdout", "stderr",
                    "output_truncated", "duration_ms", "tool_calls"]:
            if key not in report:
                failures.append(f"--json report lacks {key}: {out}")
        if report["status"] != "crash" or report["error"]["code"] != "internal_error":
            failures.append(f"--json report: {out}")
    except ValueError:
        failures.append(f"--json printed no JSON: {out!r}")
    expect(["run", "--profile", "no-such-profile", js], 125, "no-such-profile")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("PASS")
