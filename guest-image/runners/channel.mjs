// The runner channel: fd 3, a stream socket to the guest agent, carrying the protocol's frames
// (4-byte big-endian length + one JSON object; docs/protocol.md, "Runner channel").
//
// Two ways to use it. While the runner waits for its execute, and at the end of an execution
// that made no tool call, it reads and writes with blocking system calls (readFrameSync,
// writeFrameSync): nothing else has to run meanwhile, and under TCG each event-loop turn and
// stream callback on the way costs milliseconds of freshly translated code. Tool calls need
// the event loop (results come while the code runs): the first one opens a Channel, which
// makes the fd non-blocking for good.
import fs from 'node:fs';
import net from 'node:net';

// SBX_FRAME_MAX in host-agent/protocol/limits.h: the agent refuses anything longer.
export const FRAME_MAX = 4 * 1024 * 1024;

// A message object, plus one member whose value is JSON text already (from json.mjs), so
// results and tool inputs are not serialised twice.
export function encode(head, key, jsonText) {
    let text = JSON.stringify(head);
    if (key !== undefined && jsonText !== undefined)
        text = `${text.slice(0, -1)},${JSON.stringify(key)}:${jsonText}}`;
    const body = Buffer.from(text, 'utf8');
    if (body.length > FRAME_MAX)
        return null;
    const frame = Buffer.allocUnsafe(4 + body.length);
    frame.writeUInt32BE(body.length, 0);
    body.copy(frame, 4);
    return frame;
}

// The body length a frame's 4-byte header announces; one the agent never sends is an error.
function bodyLength(head) {
    const len = head.readUInt32BE(0);
    if (len === 0 || len > FRAME_MAX)
        throw new Error(`runner channel: bad frame length ${len}`);
    return len;
}

// @n bytes from @fd (blocking), or null at the end of the stream.
function readExactly(fd, n) {
    const buf = Buffer.allocUnsafe(n);
    for (let have = 0; have < n;) {
        const r = fs.readSync(fd, buf, have, n - have, null);
        if (r === 0)
            return null;
        have += r;
    }
    return buf;
}

// The next message on @fd, blocking until it is there; null when the agent closed the channel.
export function readFrameSync(fd) {
    const head = readExactly(fd, 4);
    if (head === null)
        return null;
    const body = readExactly(fd, bodyLength(head));
    return body === null ? null : JSON.parse(body.toString('utf8'));
}

// A frame from encode(), written whole before returning (the fd must still be blocking).
export function writeFrameSync(fd, frame) {
    for (let off = 0; off < frame.length;)
        off += fs.writeSync(fd, frame, off, frame.length - off);
}

// Block until the agent closes @fd (or kills us first); what it sends meanwhile is dropped.
// In parentheses: compiled eagerly (see deliver in runner.mjs).
export const waitForCloseSync = (function waitForCloseSync(fd) {
    const buf = Buffer.allocUnsafe(4096);
    try {
        while (fs.readSync(fd, buf, 0, buf.length, null) > 0)
            ;
    } catch {
        // closed in some other way: the same for us
    }
});

export class Channel {
    #sock;
    #chunks = [];
    #have = 0;
    #need = 0; // bytes of the current frame, header included; 0: header not read yet

    constructor(fd, onMessage, onClose) {
        this.onMessage = onMessage;
        this.#sock = new net.Socket({ fd, readable: true, writable: true });
        this.#sock.on('data', (data) => this.#receive(data));
        this.#sock.on('error', () => {}); // 'close' follows
        this.#sock.on('close', onClose);
    }

    // Collect chunks and join them only once a whole frame is there (no quadratic copying).
    #receive(data) {
        this.#chunks.push(data);
        this.#have += data.length;
        for (;;) {
            if (this.#need === 0) {
                if (this.#have < 4)
                    return;
                this.#need = 4 + bodyLength(this.#join());
            }
            if (this.#have < this.#need)
                return;
            const buf = this.#join();
            const frame = buf.subarray(4, this.#need);
            this.#chunks = buf.length > this.#need ? [buf.subarray(this.#need)] : [];
            this.#have = buf.length - this.#need;
            this.#need = 0;
            this.onMessage(JSON.parse(frame.toString('utf8')));
        }
    }

    #join() {
        if (this.#chunks.length > 1)
            this.#chunks = [Buffer.concat(this.#chunks)];
        return this.#chunks[0];
    }

    // Queue a frame from encode(); returns a promise settled once it is handed to the kernel.
    send(frame) {
        return new Promise((resolve) => this.#sock.write(frame, () => resolve()));
    }

    // Whether the channel alone keeps node alive (only while tool calls wait for results).
    ref(on) {
        if (on)
            this.#sock.ref();
        else
            this.#sock.unref();
    }
}
