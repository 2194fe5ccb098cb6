#!/usr/bin/env python3
"""`sandbox tools --types py` prints Python that parses (ast.parse), for a catalog with awkward
names, descriptions and schemas; `--types ts` prints the declaration; bad usage exits 2."""
import ast
import json
import os
import subprocess
import sys
import tempfile

SANDBOX = sys.argv[1]
CMD = {"kind": "command", "command": ["/bin/cat"]}
CATALOG = {"providers": {
    "git-hub": dict(CMD, tools={
        "search-issues": {
            "description": 'Quotes " \'\'\' """ and \\ backslash\nand */ a new line',
            "input_schema": {
                "type": "object", "required": ["q", "class"],
                "properties": {
                    "q": {"type": "string"}, "class": {"type": "integer"},
                    "ké y": {"enum": ["a\"b", None, 2.5, False]},
                    "n": {"$ref": "#/$defs/n"}, "u": {"anyOf": [{"type": "string"}, {}]},
                    "arr": {"type": "array", "items": {"type": "array"}},
                },
                "$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}}},
            }},
        "class": {}, "2x": {"input_schema": {"not": {}}}, "evil */ name": {}}),
    "None": dict(CMD, tools={}),
}}


def run(*args):
    return subprocess.run([SANDBOX, "tools", *args], capture_output=True, text=True, timeout=30)


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "tools.json")
    with open(path, "w") as f:
        json.dump(CATALOG, f)
    py = run("--types", "py", "--tools", path)
    assert py.returncode == 0, py.stderr
    ast.parse(py.stdout)
    exec(compile(py.stdout, "stubs.py", "exec"), {})  # the annotations evaluate, too
    ts = run("--types", "ts", "--tools", path)
    assert ts.returncode == 0, ts.stderr
    assert ts.stdout.count("declare const tools: {") == 1, ts.stdout
    assert "    class_(input: { [key: string]: unknown }): Promise<unknown>;" in ts.stdout
    assert "  None_: {\n  };\n" in ts.stdout, ts.stdout
    assert "/** `git-hub.evil *\\/ name` */\n    evil____name(" in ts.stdout, ts.stdout
    assert run("--types", "rb").returncode == 2
    assert run("--types", "py", "--tools", os.path.join(d, "missing.json")).returncode == 2
    assert run().returncode == 2
print("ok")
