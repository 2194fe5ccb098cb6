#!/usr/bin/env python3
"""Guest code cannot reach what the guest closes (docs/guest-image.md, "Hardening").

Usage: guest_hardening_test.py SANDBOX_BINARY PROFILE [--cold]

Runs one Python program in a real VM through `sandbox run` (restored from the profile's
snapshot, or booted with --cold) and checks what it saw:
  - it is uid 1000 with no capabilities, under a seccomp filter, with no_new_privs;
  - user.max_user_namespaces is 0, kernel.yama.ptrace_scope is 3;
  - unshare(CLONE_NEWUSER) and `unshare -U true` fail;
  - io_uring_setup/enter/register (425-427) fail with ENOSYS, also through int 0x80 (the
    i386 entry) and as x32 calls, while the neighbouring calls 424 and 428 still reach the
    kernel (the filter refuses exactly io_uring);
  - PTRACE_ATTACH and PTRACE_SEIZE of another process (a child of its own, same uid) and
    PTRACE_TRACEME fail with EPERM.
Like tests/integration/run_test.py: a private runtime dir, the CLI's PID tracked, nothing
left behind. Exit 0 pass, 1 fail, 77 skipped (no guest image).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import procs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

# What guest code runs: prints one JSON object of observations.
PROBE = r'''
import ctypes, errno, json, mmap, os, subprocess

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
out = {}

def result(rc):
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

def read(path):
    with open(path) as f:
        return f.read().strip()

status = dict(l.split(":", 1) for l in read("/proc/self/status").splitlines() if ":" in l)
out["uid"] = [os.getuid(), os.geteuid()]
out["cap_eff"] = status["CapEff"].strip()
out["seccomp"] = status["Seccomp"].strip()
out["no_new_privs"] = status["NoNewPrivs"].strip()
out["max_user_namespaces"] = read("/proc/sys/user/max_user_namespaces")
out["ptrace_scope"] = read("/proc/sys/kernel/yama/ptrace_scope")

def in_child(fn):
    """fn()'s result in a fresh single-threaded child (the runner has threads, and
    unshare(CLONE_NEWUSER) refuses a multithreaded caller with EINVAL whatever the limits)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ctypes.set_errno(0)
        os.write(w, fn().encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return got

CLONE_NEWUSER = 0x10000000
out["unshare_newuser"] = in_child(lambda: result(libc.unshare(CLONE_NEWUSER)))
p = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
out["unshare_cmd"] = [p.returncode, p.stderr.strip()]

params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
X32 = 0x40000000
calls = {"io_uring_setup": (425, 1, params), "io_uring_enter": (426, -1, 0, 0, 0, None, 0),
         "io_uring_register": (427, -1, 0, None, 0), "x32_io_uring_setup": (X32 + 425, 1, params),
         "pidfd_send_signal": (424, -1, 0, None, 0), "open_tree": (428, -1, None, 0)}
for name, args in calls.items():
    ctypes.set_errno(0)
    out[name] = result(libc.syscall(*args))

# io_uring_setup(1, NULL) through int 0x80, the i386 entry: -EFAULT if it reached io_uring.
code = bytes([0xb8, 0xa9, 0x01, 0x00, 0x00,   # mov eax, 425
              0xbb, 0x01, 0x00, 0x00, 0x00,   # mov ebx, 1
              0x31, 0xc9,                     # xor ecx, ecx
              0xcd, 0x80,                     # int 0x80
              0xc3])                          # ret
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
rc = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
out["int80_io_uring_setup"] = "ok" if rc >= 0 else errno.errorcode.get(-rc, str(-rc))

PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206
for name, req in (("ptrace_attach", PTRACE_ATTACH), ("ptrace_seize", PTRACE_SEIZE)):
    child = os.fork()  # another process of the same user: a fresh one each time
    if child == 0:
        os.execv("/bin/sleep", ["sleep", "60"])
    ctypes.set_errno(0)
    out[name] = result(libc.ptrace(req, child, None, None))
    os.kill(child, 9)
    os.waitpid(child, 0)
out["ptrace_traceme"] = in_child(lambda: result(libc.ptrace(PTRACE_TRACEME, 0, None, None)))
print(json.dumps(out))
'''

EXPECT = {
    "uid": [1000, 1000],
    "cap_eff": "0000000000000000",
    "seccomp": "2",
    "no_new_privs": "1",
    "max_user_namespaces": "0",
    "ptrace_scope": "3",
    "unshare_newuser": "ENOSPC",
    "io_uring_setup": "ENOSYS",
    "io_uring_enter": "ENOSYS",
    "io_uring_register": "ENOSYS",
    "x32_io_uring_setup": "ENOSYS",
    "int80_io_uring_setup": "ENOSYS",
    "pidfd_send_signal": "EBADF",
    "ptrace_attach": "EPERM",
    "ptrace_seize": "EPERM",
    "ptrace_traceme": "EPERM",
}


processes_mentioning = procs.processes_mentioning


def run(binary, profile, cold, runtime):
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime, TMPDIR=runtime)
    env.setdefault("SANDBOX_ACCEL", "tcg")
    argv = [binary, "run", "--no-serve", "--lang", "python", "--json", "--profile", profile,
            *(["--cold"] if cold else []), "-"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=TOP, start_new_session=True)
    try:
        out, err = proc.communicate(PROBE.encode(), timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, "sandbox run did not finish in 240 s"
    try:
        return json.loads(out), err.decode(errors="replace")
    except ValueError:
        return None, f"no JSON from sandbox run (rc {proc.returncode}): {out[:500]!r} {err[-3000:]!r}"


def check(result):
    """The failures in what the guest program saw."""
    if result.get("status") != "ok":
        return [f"the probe did not finish ok: {json.dumps(result)[:3000]}"]
    try:
        seen = json.loads(result["stdout"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"no observations in the output: {result['stdout'][:2000]!r}"]
    print("guest saw:", json.dumps(seen, sort_keys=True))
    failures = [f"{k}: expected {v!r}, got {seen.get(k)!r}" for k, v in EXPECT.items()
                if seen.get(k) != v]
    # open_tree(-1, NULL, 0): reaches the kernel, which rejects the arguments (not ENOSYS).
    if seen.get("open_tree") in (None, "ENOSYS"):
        failures.append(f"open_tree (428) should reach the kernel, got {seen.get('open_tree')!r}")
    rc, msg = seen.get("unshare_cmd", [0, ""])
    if rc == 0:
        failures.append(f"`unshare -U true` succeeded: {msg!r}")
    return failures


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--cold"):
        print(f"usage: {sys.argv[0]} SANDBOX PROFILE [--cold]", file=sys.stderr)
        return 2
    binary, profile, cold = sys.argv[1], sys.argv[2], len(sys.argv) == 4
    image = os.environ.get("SANDBOX_IMAGE_DIR",
                           os.path.join(os.path.dirname(os.path.dirname(binary)), "image"))
    if not os.path.exists(os.path.join(image, "manifest.json")):
        print(f"SKIP: no guest image in {image} (run scripts/build)")
        return 77
    runtime = tempfile.mkdtemp(prefix="sbx-hard-")
    try:
        result, err = run(binary, profile, cold, runtime)
        failures = [err] if result is None else check(result)
    finally:
        leftovers = [os.path.join(r, n) for r, ds, fs in os.walk(runtime) for n in ds + fs]
        pids = processes_mentioning(runtime)
        for pid in pids:  # only processes that carry our private dir: ours by construction
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(runtime, ignore_errors=True)
    if pids:
        failures.append(f"processes left running: {pids}")
    if leftovers:
        failures.append(f"files left in the runtime dir: {leftovers}")
    for f in failures:
        print(f"FAIL ({profile}{' --cold' if cold else ''}): {f}")
    if not failures:
        print("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
