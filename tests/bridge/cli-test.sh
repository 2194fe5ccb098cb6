#!/usr/bin/env bash
# sandbox-bridge as a process: bad arguments exit 2 with a message, an existing socket path
# is refused (and left alone), READY arrives on --ready-fd once both sockets listen, SIGTERM
# and SIGINT exit 0 and remove both sockets, a vhost-user peer that connects and leaves
# ends the bridge with exit 0, and from READY on the bridge runs under its seccomp filter with
# no_new_privs (in both --seccomp modes). Processes started here are killed by PID; the temp
# dir goes.
#
# usage: cli-test.sh BRIDGE
set -euo pipefail
bridge=$(realpath "$1")
tmp=$(mktemp -d /tmp/bridge-cli.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAILED: $*"; failed=$((failed + 1)); }

expect_exit() { # expect_exit CODE PATTERN ARGS...
    local code=$1 pattern=$2 rc=0
    shift 2
    "$bridge" "$@" >"$tmp/out" 2>&1 || rc=$?
    if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" "$tmp/out"; then
        ok "exit $code for: $*"
    else
        bad "expected exit $code and '$pattern' for: $* (got $rc: $(head -n 1 "$tmp/out"))"
    fi
}

v=$tmp/vu.sock u=$tmp/hy.sock
expect_exit 2 "missing --guest-cid" --vhost-user "$v" --uds "$u"
expect_exit 2 "not a CID" --vhost-user "$v" --uds "$u" --guest-cid 2
expect_exit 2 "unknown option" --vhost-user "$v" --uds "$u" --guest-cid 3 --nope
expect_exit 2 "is not open" --vhost-user "$v" --uds "$u" --guest-cid 3 --ready-fd 97
expect_exit 2 "neither kill nor log" --vhost-user "$v" --uds "$u" --guest-cid 3 --seccomp=off
expect_exit 0 "usage" --help
touch "$u"
expect_exit 1 "already exists" --vhost-user "$v" --uds "$u" --guest-cid 3
[ -f "$u" ] && [ ! -e "$v" ] && ok "existing path left alone, nothing else left behind" ||
    bad "refusal touched the paths"
rm -f "$u"

# start_bridge [ARGS...]: runs it in the background with --ready-fd; waits for READY.
start_bridge() {
    rm -f "$tmp/ready" && mkfifo "$tmp/ready"
    "$bridge" --vhost-user "$v" --uds "$u" --guest-cid 3 --ready-fd 3 "$@" 3>"$tmp/ready" &
    bpid=$!
    pids+=("$bpid")
    if [ "$(timeout 10 head -n 1 "$tmp/ready")" = READY ] && [ -S "$v" ] && [ -S "$u" ]; then
        ok "READY after both sockets listen"
    else
        bad "no READY"
    fi
}

# expect_confined: the filter is in place by READY (Seccomp 2 = filter mode).
expect_confined() {
    local st
    st=$(grep -E '^(Seccomp|NoNewPrivs):' "/proc/$bpid/status" | tr -s ' \t' ' ' | tr '\n' ' ')
    if [ "$st" = "NoNewPrivs: 1 Seccomp: 2 " ]; then
        ok "confined: $st"
    else
        bad "not confined: '$st'"
    fi
}

stop_with() { # stop_with SIGNAL
    local rc=0
    kill -s "$1" "$bpid"
    wait "$bpid" || rc=$?
    if [ "$rc" -eq 0 ] && [ ! -e "$v" ] && [ ! -e "$u" ]; then
        ok "SIG$1: exit 0, sockets removed"
    else
        bad "SIG$1: exit $rc, sockets: $(ls "$tmp")"
    fi
}

start_bridge
expect_confined
stop_with TERM
start_bridge --seccomp=log
expect_confined
stop_with INT

# A front-end that connects and goes away: "the VM is gone", exit 0.
start_bridge
python3 - "$v" <<'PY' || bad "could not play the front-end"
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(struct.pack("<III", 1, 1, 0))           # GET_FEATURES
req, flags, size = struct.unpack("<III", s.recv(12))
feat, = struct.unpack("<Q", s.recv(size))
assert req == 1 and flags == 5 and feat & (1 << 30), (req, flags, feat)
s.close()
PY
rc=0
timeout 10 tail --pid="$bpid" -f /dev/null || true
wait "$bpid" || rc=$?
[ "$rc" -eq 0 ] && [ ! -e "$v" ] && [ ! -e "$u" ] && ok "front-end left: exit 0, sockets removed" ||
    bad "front-end left: exit $rc"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
