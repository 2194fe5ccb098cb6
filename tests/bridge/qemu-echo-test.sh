#!/usr/bin/env bash
# Boots a minimal guest under QEMU (TCG) with its vsock device served by sandbox-bridge, and
# proves vsock works both ways through the bridge:
#   - host -> guest: hybrid clients CONNECT to the guest's echo service and stream 5 KB,
#     4 MB (credit flow: 16x the 256 KiB window) and 4 parallel 1 MB streams, then 200 1-byte
#     round trips (latency); a port nobody listens on and a garbage line are refused;
#   - guest -> host: the guest connects to host port 5000 (relayed to <uds>_5000, an echo
#     server here) and streams 2 MB both ways;
#   - QEMU exits (or the device is unplugged): the bridge exits 0 and removes its sockets.
# On q35 (virtio-pci, modern), on microvm (virtio-mmio, legacy virtio), and on q35 with the
# device hot-plugged after boot and unplugged through QMP (the host agent's restore flow).
#
# usage: qemu-echo-test.sh BRIDGE HYBRID_CLIENT GUEST_ECHO_C CACHE_DIR
# The guest (Debian's cloud kernel, its virtio/vsock modules, busybox, guest-echo) is built
# once under CACHE_DIR. Exit 77 (skip) only when a tool or the kernel package cannot be had.
# Every process is started here, tracked by PID and killed by PID; the temp dir is removed.
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 BRIDGE HYBRID_CLIENT GUEST_ECHO_C CACHE_DIR" >&2; exit 2; }
bridge=$(realpath "$1") client=$(realpath "$2") echo_src=$(realpath "$3")
here=$(dirname "$(realpath "$0")")
cache=$(mkdir -p "$4" && realpath "$4")

# How long the guest may take to boot and start its echo service under TCG (~2 s normally;
# generous because the machine is shared).
readonly BOOT_TIMEOUT_S=90
readonly KERNEL_META=linux-image-cloud-amd64
readonly GUEST_PORT=1234 HOST_PORT=5000 GUEST_BYTES=2000000

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
log() { echo "== $*"; }

for tool in qemu-system-x86_64 cpio gzip cc apt-get apt-cache dpkg python3; do
    command -v "$tool" >/dev/null || skip "$tool is not installed"
done
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 || skip "a static busybox (busybox-static) is needed"

# ---- the guest ---------------------------------------------------------------------------
fetch_kernel() {
    local kdir=$cache/kernel pkg deb
    if [ -f "$kdir/ok" ]; then return 0; fi
    rm -rf "$kdir" && mkdir -p "$kdir"
    pkg=$(apt-cache depends "$KERNEL_META" 2>/dev/null |
          awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
    [ -n "$pkg" ] || skip "apt-cache knows no $KERNEL_META (run apt-get update)"
    (cd "$kdir" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >apt.log 2>&1) ||
        skip "apt-get download $pkg failed: $(tail -n 2 "$kdir/apt.log")"
    deb=$(ls "$kdir"/*.deb)
    dpkg -x "$deb" "$kdir/x" && rm -f "$deb"
    touch "$kdir/ok"
}

build_initramfs() {
    local root=$cache/root kver kmods m
    kver=$(ls "$cache/kernel/x/lib/modules")
    kmods=$cache/kernel/x/lib/modules/$kver/kernel
    rm -rf "$root" && mkdir -p "$root"/{bin,proc,sys,dev,mods}
    cp "$busybox" "$root/bin/busybox"
    cc -static -O2 -o "$root/bin/guest-echo" "$echo_src"
    for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio \
             drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci_modern_dev \
             drivers/virtio/virtio_pci net/vmw_vsock/vsock \
             net/vmw_vsock/vmw_vsock_virtio_transport_common \
             net/vmw_vsock/vmw_vsock_virtio_transport; do
        cp "$kmods/$m.ko" "$root/mods/"
    done
    # The kernel hands unknown key=value boot parameters to init as environment variables.
    cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_mmio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
         vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport; do
    /bin/busybox insmod /mods/$m.ko 2>/dev/null
done
/bin/guest-echo serve "$ECHO_PORT" &
/bin/busybox sleep 1
/bin/guest-echo client "$HOST_PORT" "$GUEST_BYTES"
echo GUEST-INIT-DONE
while true; do /bin/busybox sleep 1000; done
INIT
    chmod +x "$root/init"
    (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/initrd.gz"
}

tsc_khz() {
    local mhz
    if [ -n "${SANDBOX_TSC_KHZ:-}" ]; then echo "$SANDBOX_TSC_KHZ"; return; fi
    mhz=$(dmesg 2>/dev/null | grep -oE 'tsc: (Refined TSC clocksource calibration|Detected) [0-9]+\.[0-9]+ MHz' |
          tail -n 1 | grep -oE '[0-9]+\.[0-9]+') || true
    [ -n "$mhz" ] || skip "cannot read the host TSC frequency from dmesg (set SANDBOX_TSC_KHZ)"
    echo "${mhz/./}"
}

# ---- processes we own ----------------------------------------------------------------------
tmp=$(mktemp -d /tmp/bridge-qemu.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

wait_for() { # wait_for FILE PATTERN SECONDS
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

run_machine() { # run_machine NAME cold|hotplug QEMU-ARGS...
    local name=$1 mode=$2 dir=$tmp/$1 vmpid brpid srvpid rc
    shift 2
    mkdir -p "$dir"
    log "$name: boot"
    "$client" echo-server "$dir/hy.sock_$HOST_PORT" & srvpid=$!
    pids+=("$srvpid")
    mkfifo "$dir/ready"
    "$bridge" --vhost-user "$dir/vu.sock" --uds "$dir/hy.sock" --guest-cid 3 --verbose \
        --ready-fd 3 3>"$dir/ready" 2>"$dir/bridge.log" & brpid=$!
    pids+=("$brpid")
    [ "$(timeout 10 head -n 1 "$dir/ready")" = READY ] || fail "$name: bridge never said READY"
    local vsock=(-chardev "socket,id=vs0,path=$dir/vu.sock")
    [ "$mode" = cold ] || vsock=(-qmp "unix:$dir/qmp.sock,server=on,wait=off")
    qemu-system-x86_64 -accel tcg -m 256M -nodefaults -display none -no-reboot \
        -object memory-backend-memfd,id=pc.ram,size=256M,share=on -machine memory-backend=pc.ram \
        "${vsock[@]}" "$@" \
        -kernel "$kernel" -initrd "$cache/initrd.gz" -serial "file:$dir/serial.log" \
        -append "console=ttyS0 panic=-1 quiet tsc_early_khz=$khz ECHO_PORT=$GUEST_PORT HOST_PORT=$HOST_PORT GUEST_BYTES=$GUEST_BYTES" \
        >"$dir/qemu.log" 2>&1 & vmpid=$!
    pids+=("$vmpid")
    wait_for "$dir/serial.log" GUEST-ECHO "$BOOT_TIMEOUT_S" ||
        { cat "$dir/serial.log" "$dir/qemu.log"; fail "$name: guest did not start"; }
    grep -q "GUEST-ECHO READY" "$dir/serial.log" || { cat "$dir/serial.log"; fail "$name: guest echo"; }
    if [ "$mode" = hotplug ]; then
        # As after a restore: the guest listens before the device exists, then it is plugged.
        timeout 30 python3 "$here/qmp-plug.py" "$dir/qmp.sock" plug "$dir/vu.sock" rp1 ||
            fail "$name: hot-plug failed"
    fi

    log "$name: host -> guest"
    "$client" connect "$dir/hy.sock" "$GUEST_PORT" 5000
    "$client" connect "$dir/hy.sock" "$GUEST_PORT" 4000000
    local par=() p
    for p in 1 2 3 4; do "$client" connect "$dir/hy.sock" "$GUEST_PORT" 1000000 & par+=($!); done
    for p in "${par[@]}"; do wait "$p" || fail "$name: parallel stream failed"; done
    "$client" latency "$dir/hy.sock" "$GUEST_PORT" 200
    "$client" refused "$dir/hy.sock" 4321
    "$client" garbage "$dir/hy.sock"

    log "$name: guest -> host"
    wait_for "$dir/serial.log" GUEST-INIT-DONE 90 || fail "$name: guest client did not finish"
    grep "GUEST-CLIENT" "$dir/serial.log"
    grep -q "GUEST-CLIENT OK" "$dir/serial.log" || fail "$name: guest -> host stream failed"

    log "$name: shutdown"
    if [ "$mode" = hotplug ]; then
        # Unplugging (device_del, chardev-remove) ends the bridge while the VM lives on.
        timeout 30 python3 "$here/qmp-plug.py" "$dir/qmp.sock" unplug || fail "$name: unplug failed"
    else
        kill "$vmpid"
    fi
    rc=0; timeout 10 tail --pid="$brpid" -f /dev/null || fail "$name: bridge did not exit"
    wait "$brpid" || rc=$?
    [ "$rc" -eq 0 ] || { cat "$dir/bridge.log"; fail "$name: bridge exited $rc"; }
    [ ! -e "$dir/vu.sock" ] && [ ! -e "$dir/hy.sock" ] || fail "$name: bridge left its sockets"
    grep "packets in" "$dir/bridge.log" || true
    kill "$vmpid" 2>/dev/null || true; wait "$vmpid" 2>/dev/null || true
    kill "$srvpid"; wait "$srvpid" 2>/dev/null || true
}

fetch_kernel
{ [ "$cache/initrd.gz" -nt "$echo_src" ] && [ "$cache/initrd.gz" -nt "$0" ]; } || build_initramfs
kernel=$(ls "$cache"/kernel/x/boot/vmlinuz-*)
khz=$(tsc_khz)

run_machine q35 cold -M q35 -device vhost-user-vsock-pci,chardev=vs0
# microvm: ACPI on (the kernel finds virtio-mmio devices through it), legacy virtio-mmio;
# bus 0's interrupt never arrives, so bus 1.
run_machine microvm cold -M microvm \
    -device vhost-user-vsock-device,chardev=vs0,bus=virtio-mmio-bus.1
# The restore flow: no vsock device at boot, hot-plugged on a PCIe root port, unplugged.
run_machine q35-hotplug hotplug -M q35 -device pcie-root-port,id=rp1,chassis=1,slot=1
echo "PASS: vsock through sandbox-bridge on q35, microvm and q35 with hot-plug"
