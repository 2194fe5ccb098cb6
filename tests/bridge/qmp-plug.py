#!/usr/bin/env python3
"""Hot-plug or unplug a vhost-user-vsock-pci device through QMP, the way the host agent attaches
vsock to a restored VM (shared/FINDINGS.md, "vsock after a restore"):
    qmp-plug.py QMP_SOCKET plug VHOST_USER_SOCKET ROOT_PORT
    qmp-plug.py QMP_SOCKET unplug
Every wait is bounded; prints how long the operation took."""
import json
import socket
import sys
import time

TIMEOUT_S = 15  # a QMP call that hangs means a frozen VM: fail, the caller kills it


class QMP:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(path)
        self.file = self.sock.makefile('rwb')
        self.events = []
        self.read()  # greeting
        self.cmd('qmp_capabilities')

    def read(self):
        line = self.file.readline()
        if not line:
            raise RuntimeError('QMP closed')
        return json.loads(line)

    def cmd(self, name, **args):
        self.file.write(json.dumps({'execute': name, 'arguments': args}).encode() + b'\n')
        self.file.flush()
        while True:
            msg = self.read()
            if 'event' in msg:
                self.events.append(msg)
            elif 'error' in msg:
                raise RuntimeError(f'{name}: {msg["error"]}')
            else:
                return msg['return']

    def wait_event(self, name):
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e['event'] == name for e in self.events):
            if time.monotonic() > deadline:
                raise RuntimeError(f'no {name} event')
            self.events.append(self.read())


def main():
    qmp = QMP(sys.argv[1])
    start = time.monotonic()
    if sys.argv[2] == 'plug':
        qmp.cmd('chardev-add', id='vsock-chr', backend={
            'type': 'socket',
            'data': {'addr': {'type': 'unix', 'data': {'path': sys.argv[3]}}, 'server': False}})
        qmp.cmd('device_add', driver='vhost-user-vsock-pci', id='vsock-dev',
                chardev='vsock-chr', bus=sys.argv[4])
    else:
        qmp.cmd('device_del', id='vsock-dev')
        qmp.wait_event('DEVICE_DELETED')
        qmp.cmd('chardev-remove', id='vsock-chr')
    print(f'{sys.argv[2]} took {time.monotonic() - start:.3f} s')


if __name__ == '__main__':
    main()
