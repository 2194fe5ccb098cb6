#!/usr/bin/env python3
"""Image recipes (guest-image/recipes/README.md): guest-image/build-image with --recipe.

Usage: recipe_test.py SANDBOX_BINARY AGENT_BINARY TEST_NAME

  errors               malformed recipes fail before anything is built, naming file:line
  missing_debian       a Debian package that does not exist fails the build with its name
  missing_npm          so does an npm package, or a version of one, that the registry lacks;
                       a package with a native addon to build fails by name
  side_by_side         an image of another recipe (the default's packages + npm is-odd, which
                       depends on is-number) built into a directory of its own; a profile with
                       "image" runs it while the default profile runs the default image, from
                       one snapshot directory holding both images' snapshots

Each test works in a fresh temp dir (outputs, profiles, snapshots) that it removes; builds
share the checkout's cache (build/image-cache: the default image's debootstrap tree and node,
under build-image's own lock). Builds need root (debootstrap, chroot): skipped otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
BUILD_IMAGE = os.path.join(TOP, "guest-image", "build-image")
DEFAULT_RECIPE = os.path.join(TOP, "guest-image", "recipes", "default.recipe")
RUNNERS = os.path.join(TOP, "guest-image", "runners")
CACHE = os.path.join(TOP, "build", "image-cache")
DEFAULT_IMAGE = os.environ.get("SANDBOX_IMAGE_DIR", os.path.join(TOP, "build", "image"))
BUILD_TIMEOUT = 1500  # a rootfs of ~630 MiB copied and packed, and npm, on a loaded host


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}")


def default_debian_lines():
    """The default recipe's `debian` lines: a test recipe with the same packages shares its
    cached debootstrap tree (no new debootstrap)."""
    with open(DEFAULT_RECIPE) as f:
        return [line for line in f if line.startswith("debian ")]


class Ctx:
    def __init__(self, sandbox, agent):
        self.sandbox, self.agent = sandbox, agent
        self.dir = tempfile.mkdtemp(prefix="sbx-recipe-test-")
        # QEMU runs jailed as another user (docs/vm.md): the images below must be readable.
        os.chmod(self.dir, 0o755)

    def recipe(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def build(self, recipe, out=None, need_root=True):
        """build-image with @recipe into @out (a fresh dir): (rc, stdout + stderr)."""
        if need_root and os.geteuid() != 0:
            raise Skip("build-image needs root (debootstrap, chroot)")
        out = out or os.path.join(self.dir, "out")
        p = subprocess.run([BUILD_IMAGE, "--agent", self.agent, "--runners", RUNNERS,
                            "--recipe", recipe, "--out", out, "--cache", CACHE],
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout + p.stderr

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def expect_failure(ctx, name, text, message, need_root=False):
    rc, out = ctx.build(ctx.recipe(name, text), need_root=need_root)
    check(rc != 0 and message in out, f"{name}: fails with \"{message}\"", f"rc {rc}\n{out}")
    check(not os.path.exists(os.path.join(ctx.dir, "out", "manifest.json")),
          f"{name}: no image left", out)


def test_errors(ctx):
    cases = [
        ("a.recipe", "debian python3-numpy\nruby rails\n", "a.recipe:2: unknown line \"ruby\""),
        ("b.recipe", "npm is-odd ^3.0.0\n", "npm is-odd: \"^3.0.0\" is not an exact version"),
        ("c.recipe", "npm is-odd\n", "c.recipe:1: expected \"npm NAME VERSION\""),
        ("d.recipe", "debian Python3_Numpy\n", "d.recipe:1: \"Python3_Numpy\" is not a Debian package name"),
        ("e.recipe", "npm is-odd 3.0.1\nnpm is-odd 3.0.0\n", "e.recipe:2: npm is-odd named twice"),
        ("f.recipe", "npm ../evil 1.0.0\n", "\"../evil\" is not an npm package name"),
        ("Bad.recipe", "debian jq\n", "its file name must be NAME.recipe"),
        ("g.recipe", "# only a comment\ndebian\n", "g.recipe:2: \"debian\" names no package"),
        ("h.recipe", "debian " + "x" * 70000 + "\n", "larger than 65536 bytes"),
    ]
    for name, text, message in cases:
        expect_failure(ctx, name, text, message)
    rc, out = ctx.build(os.path.join(ctx.dir, "none.recipe"), need_root=False)
    check(rc != 0 and "no such file" in out, "a missing recipe file", out)


def test_missing_debian(ctx):
    expect_failure(ctx, "nodeb.recipe", "".join(default_debian_lines()) +
                   "debian sbx-no-such-package\n",
                   "no Debian package named sbx-no-such-package", need_root=True)


def test_missing_npm(ctx):
    base = "".join(default_debian_lines())
    expect_failure(ctx, "nonpm.recipe", base + "npm sbx-no-such-package-zz 1.0.0\n",
                   "no npm package sbx-no-such-package-zz version 1.0.0", need_root=True)
    expect_failure(ctx, "nover.recipe", base + "npm is-odd 99.0.0\n",
                   "no npm package is-odd version 99.0.0", need_root=True)
    # Install scripts do not run: a package with a native addon to build is named.
    expect_failure(ctx, "addon.recipe", base + "npm bufferutil 4.0.8\n",
                   "native addon to build (binding.gyp), which the image cannot have: bufferutil",
                   need_root=True)


def manifest(image_dir):
    with open(os.path.join(image_dir, "manifest.json")) as f:
        return json.load(f)


NPM_JS = """const isOdd = require('is-odd');
import isNumber from 'is-number';
[isOdd(3), isOdd(4), isNumber(5), require.resolve('is-odd')]"""


def run(ctx, env, profile, lang, code):
    p = subprocess.run([ctx.sandbox, "run", "--no-serve", "--json", "--profile", profile,
                        "--lang", lang, "-"], input=code, capture_output=True, text=True,
                       env=env, timeout=600)
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise Failure(f"sandbox run --profile {profile}: no report (rc {p.returncode})\n"
                      f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def test_side_by_side(ctx):
    if not os.path.exists(os.path.join(DEFAULT_IMAGE, "manifest.json")):
        raise Skip(f"no default image in {DEFAULT_IMAGE} (run scripts/build)")
    images = os.path.join(ctx.dir, "images")
    out = os.path.join(images, "sbxtest")
    recipe = ctx.recipe("sbxtest.recipe", "".join(default_debian_lines()) +
                        "# is-odd depends on is-number: npm resolves the tree\n"
                        "npm is-odd 3.0.1\n")
    rc, log = ctx.build(recipe, out)
    check(rc == 0, "the sbxtest image builds", log)
    mine, default = manifest(out), manifest(DEFAULT_IMAGE)
    check(mine["recipe"]["name"] == "sbxtest" and mine["recipe"]["npm"] == ["is-odd@3.0.1"]
          and mine["recipe"]["npm_lock_sha256"], "the manifest records the recipe",
          json.dumps(mine["recipe"]))
    check(mine["image_id"] != default["image_id"], "its own image id",
          f"{mine['image_id']} {default['image_id']}")
    # Profiles: the default q35-serial, and the same machine naming the sbxtest image.
    profiles = os.path.join(ctx.dir, "profiles")
    os.mkdir(profiles)
    with open(os.path.join(TOP, "qemu-profiles", "q35-serial.json")) as f:
        base = json.load(f)
    with open(os.path.join(profiles, "q35-serial.json"), "w") as f:
        json.dump(base, f)
    with open(os.path.join(profiles, "q35-serial-sbxtest.json"), "w") as f:
        json.dump(dict(base, name="q35-serial-sbxtest", image="sbxtest"), f)
    snapshots = os.path.join(ctx.dir, "snapshots")
    os.mkdir(snapshots, 0o700)
    runtime = os.path.join(ctx.dir, "run")
    os.mkdir(runtime, 0o700)
    env = dict(os.environ, SANDBOX_PROFILES_DIR=profiles, SANDBOX_IMAGES_DIR=images,
               SANDBOX_SNAPSHOT_DIR=snapshots, XDG_RUNTIME_DIR=runtime)
    env.setdefault("SANDBOX_ACCEL", "tcg")
    r = run(ctx, env, "q35-serial-sbxtest", "javascript", NPM_JS)
    check(r["status"] == "ok" and r["result"] == [True, False, True, "/usr/lib/node/is-odd/index.js"],
          "the recipe's npm package (and its dependency) in its image", json.dumps(r)[:3000])
    r = run(ctx, env, "q35-serial-sbxtest", "python", "import numpy\nint(numpy.arange(4).sum())")
    check(r["status"] == "ok" and r["result"] == 6, "the default recipe's numpy there too",
          json.dumps(r)[:3000])
    r = run(ctx, env, "q35-serial", "javascript", NPM_JS)
    check(r["status"] == "error" and "Cannot find module 'is-odd'" in r["error"]["message"],
          "not in the default image", json.dumps(r)[:3000])
    keys = sorted(k for k in os.listdir(snapshots) if not k.startswith("."))
    ids = set()
    for k in keys:
        with open(os.path.join(snapshots, k, "inputs.json")) as f:
            ids.add(json.load(f)["image_id"])
    check(len(keys) == 2 and len(ids) == 2, "two snapshots, one per image, side by side",
          f"{keys} {ids}")
    check(os.listdir(runtime) == [], "nothing left in the runtime dir", str(os.listdir(runtime)))


TESTS = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("test_")}


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in TESTS:
        print(f"usage: {sys.argv[0]} SANDBOX AGENT {{{'|'.join(TESTS)}}}", file=sys.stderr)
        return 2
    ctx = Ctx(sys.argv[1], sys.argv[2])
    try:
        TESTS[sys.argv[3]](ctx)
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        ctx.close()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
