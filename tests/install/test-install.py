#!/usr/bin/env python3
"""`meson install` and the installed defaults (docs/install.md).

Installs the build into a temporary DESTDIR (with a tiny fake guest image, so that nothing
big is copied), checks where the files land, runs the installed `sandbox --version` and
`sandbox paths` (installed mode: the prefix's directories, XDG for a user, systemd's
*_DIRECTORY variables for the service, environment overrides first), the build-tree `sandbox
paths` (this checkout's directories, as always), an install without an image (fails saying
how to go on), and `systemd-analyze verify` of the installed unit when the tool exists.

Usage: test-install.py MESON BUILD_DIR SOURCE_DIR SANDBOX_BINARY
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

MESON, BUILD, SOURCE, SANDBOX = sys.argv[1:5]
BUILD = os.path.realpath(BUILD)
failures = []
SYSTEMD_DIRS = ("STATE_DIRECTORY", "CACHE_DIRECTORY", "RUNTIME_DIRECTORY")


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def clean_env(**extra):
    """The environment without any variable that changes a default path, plus @extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SANDBOX_") and not k.startswith("XDG_") and k not in SYSTEMD_DIRS}
    env.update(extra)
    return env


def run(argv, env, timeout=120):
    p = subprocess.run(argv, capture_output=True, env=env, timeout=timeout, text=True)
    return p.returncode, p.stdout, p.stderr


def meson_options():
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    with open(os.path.join(BUILD, "meson-info", "intro-projectinfo.json")) as f:
        version = json.load(f)["version"]
    prefix = opts["prefix"]
    return version, {k: os.path.join(prefix, opts[k]) for k in ("bindir", "libexecdir", "datadir")}


def install(dest, image_dir):
    env = clean_env(SANDBOX_IMAGE_DIR=image_dir, SANDBOX_IMAGES_DIR=os.path.join(dest, "none"))
    return run([MESON, "install", "-C", BUILD, "--destdir", dest, "--no-rebuild"], env, 600)


def fake_image(path):
    """A guest image sbx_image_open() accepts: a manifest and three small files."""
    os.makedirs(path)
    files = {"vmlinux": b"k" * 3, "initramfs.cpio": b"i" * 5, "rootfs.erofs": b"r" * 7}
    for name, data in files.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    manifest = {"image_id": "fake-image-for-test-install",
                "kernel": {"boot_file": "vmlinux"},
                "files": {n: {"size": len(d)} for n, d in files.items()}}
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def paths_of(binary, **env):
    rc, out, err = run([binary, "paths"], clean_env(**env))
    if not check(rc == 0, f"{binary} paths: rc {rc}: {err}"):
        return {}
    return json.loads(out)


def expect_paths(label, got, want):
    for key, value in want.items():
        check(got.get(key) == value, f"{label}: {key} is {got.get(key)!r}, want {value!r}")


def check_files(dest, dirs):
    def d(path):
        return dest + path

    bindir, libexec, datadir = dirs["bindir"], dirs["libexecdir"], dirs["datadir"]
    check(os.access(d(f"{bindir}/sandbox"), os.X_OK), f"no executable {bindir}/sandbox")
    check(os.access(d(f"{libexec}/sandbox/sandbox-bridge"), os.X_OK),
          f"no executable {libexec}/sandbox/sandbox-bridge")
    want = sorted(os.path.basename(p) for p in glob.glob(f"{SOURCE}/qemu-profiles/*.json"))
    got = sorted(os.listdir(d(f"{datadir}/sandbox/profiles")))
    check(want and got == want, f"profiles installed: {got}, want {want}")
    for name in ("manifest.json", "vmlinux", "initramfs.cpio", "rootfs.erofs"):
        check(os.path.isfile(d(f"{datadir}/sandbox/image/{name}")), f"image file {name} missing")
    prefix = os.path.dirname(bindir)
    unit = d(f"{prefix}/lib/systemd/system/sandbox.service")
    if check(os.path.isfile(unit), f"no unit {unit}"):
        with open(unit) as f:
            text = f.read()
        check(f"ExecStart={bindir}/sandbox serve\n" in text, f"unit's ExecStart: {text[:400]}")
        check("@" not in text.replace("%", ""), "unit has an unreplaced @variable@")
    return unit


def check_installed_binary(binary, dest, dirs, version, tmp):
    datadir, libexec = dirs["datadir"], dirs["libexecdir"]
    rc, out, err = run([binary, "--version"], clean_env())
    check(rc == 0 and out.startswith(f"sandbox {version}\n"), f"--version: rc {rc}: {out}{err}")
    rc, out, _ = run([binary, "version"],
                     clean_env(SANDBOX_IMAGE_DIR=f"{dest}{datadir}/sandbox/image"))
    check(rc == 0 and "image fake-image-for-test-install" in out, f"version with image: {out}")

    xdg = {k: os.path.join(tmp, k.lower()) for k in
           ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")}
    installed = {"build_tree": False, "version": version,
                 "profiles_dir": f"{datadir}/sandbox/profiles",
                 "image_dir": f"{datadir}/sandbox/image",
                 "images_dir": f"{datadir}/sandbox/images",
                 "bridge": f"{libexec}/sandbox/sandbox-bridge"}
    expect_paths("installed, user", paths_of(binary, **xdg), dict(installed, **{
        "snapshot_dir": f"{xdg['XDG_CACHE_HOME']}/sandbox/snapshots",
        "state_dir": f"{xdg['XDG_STATE_HOME']}/sandbox",
        "runtime_dir": f"{xdg['XDG_RUNTIME_DIR']}/sandbox",
        "serve_socket": f"{xdg['XDG_RUNTIME_DIR']}/sandbox/sandbox.sock"}))
    service = {"STATE_DIRECTORY": "/var/lib/sandbox", "CACHE_DIRECTORY": "/var/cache/sandbox",
               "RUNTIME_DIRECTORY": "/run/sandbox:/run/sandbox-jail"}
    expect_paths("installed, service", paths_of(binary, **xdg, **service), dict(installed, **{
        "snapshot_dir": "/var/cache/sandbox/snapshots", "state_dir": "/var/lib/sandbox",
        "runtime_dir": "/run/sandbox", "serve_socket": "/run/sandbox/sandbox.sock"}))
    overrides = {"SANDBOX_SNAPSHOT_DIR": "/o/snap", "SANDBOX_STATE_DIR": "/o/state",
                 "SANDBOX_IMAGE_DIR": "/o/image", "SANDBOX_PROFILES_DIR": "/o/profiles",
                 "SANDBOX_BRIDGE": "/o/bridge", "SANDBOX_SERVE_SOCKET": "/o/s.sock"}
    expect_paths("installed, overrides", paths_of(binary, **xdg, **service, **overrides), {
        "snapshot_dir": "/o/snap", "state_dir": "/o/state", "image_dir": "/o/image",
        "profiles_dir": "/o/profiles", "bridge": "/o/bridge", "serve_socket": "/o/s.sock"})
    # Without XDG_* the user's directories are the XDG defaults below $HOME.
    home = os.path.join(tmp, "home")
    expect_paths("installed, HOME only", paths_of(binary, HOME=home), {
        "snapshot_dir": f"{home}/.cache/sandbox/snapshots",
        "state_dir": f"{home}/.local/state/sandbox"})


def check_build_tree():
    # The build-tree binary keeps this checkout's paths, even under a service's variables.
    got = paths_of(SANDBOX, STATE_DIRECTORY="/var/lib/sandbox",
                   CACHE_DIRECTORY="/var/cache/sandbox", XDG_RUNTIME_DIR="/run/user/4242")
    expect_paths("build tree", got, {
        "build_tree": True, "profiles_dir": f"{SOURCE}/qemu-profiles",
        "image_dir": f"{BUILD}/image", "images_dir": f"{BUILD}/images",
        "bridge": f"{BUILD}/bridge/sandbox-bridge", "snapshot_dir": f"{BUILD}/snapshots",
        "state_dir": f"{BUILD}/state", "runtime_dir": "/run/user/4242/sandbox",
        "serve_socket": "/run/user/4242/sandbox/sandbox.sock"})


def verify_unit(unit, dest, dirs, tmp):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        print("SKIP systemd-analyze verify: systemd-analyze not found (scripts/setup installs "
              "the systemd package)")
        return
    # verify wants ExecStart's binary to exist: point it at the installed copy.
    copy = os.path.join(tmp, "sandbox.service")
    with open(unit) as f:
        text = f.read().replace(f"{dirs['bindir']}/sandbox", f"{dest}{dirs['bindir']}/sandbox")
    with open(copy, "w") as f:
        f.write(text)
    p = subprocess.run([tool, "verify", copy], capture_output=True, text=True, cwd=tmp,
                       timeout=60)
    check(p.returncode == 0 and p.stderr.strip() == "" and p.stdout.strip() == "",
          f"systemd-analyze verify: rc {p.returncode}: {p.stdout}{p.stderr}")


def main():
    version, dirs = meson_options()
    with tempfile.TemporaryDirectory(prefix="sbx-install-") as tmp:
        tmp = os.path.realpath(tmp)
        if tmp.startswith(BUILD + "/"):
            sys.exit(f"test-install: {tmp} lies in the build tree; the installed copy must not")
        dest, image = os.path.join(tmp, "dest"), os.path.join(tmp, "image")
        fake_image(image)
        rc, out, err = install(dest, image)
        if not check(rc == 0, f"meson install: rc {rc}:\n{out}{err}"):
            return
        unit = check_files(dest, dirs)
        check_installed_binary(dest + dirs["bindir"] + "/sandbox", dest, dirs, version, tmp)
        check_build_tree()
        if os.path.isfile(unit):
            verify_unit(unit, dest, dirs, tmp)

        # No image built: the install fails, saying what to do.
        dest2 = os.path.join(tmp, "dest2")
        rc, out, err = install(dest2, os.path.join(tmp, "no-image"))
        check(rc != 0, f"install without an image: rc {rc}")
        check("guest image is NOT installed" in out + err and "-Dinstall_image=false" in out + err,
              f"install without an image said:{out}{err}")
        check(not os.path.exists(f"{dest2}{dirs['datadir']}/sandbox/image"),
              "install without an image made an image directory")
        check(os.path.isfile(f"{dest2}{dirs['bindir']}/sandbox"), "install without image: no bin")


main()
for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
