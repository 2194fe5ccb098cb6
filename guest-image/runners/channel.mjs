// The runner channel: fd 3, a stream socket to the guest agent, carrying the protocol's frames
// (4-byte big-endian length + one JSON object; docs/protocol.md, "Runner channel").
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
                const len = this.#join().readUInt32BE(0);
                if (len === 0 || len > FRAME_MAX)
                    throw new Error(`runner channel: bad frame length ${len}`);
                this.#need = 4 + len;
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
