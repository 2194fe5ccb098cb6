// What makes a JavaScript execution differ from a run of the same code, made recordable (issue
// 16; guest-image/runners/README.md, "Randomness and the clock"; docs/protocol.md, "Replay").
//
// - Randomness: one generator per execution, seeded by the host's `execute.seed`: HMAC-SHA256
//   keyed by the seed in counter mode, made by PBKDF2 with one iteration (chunk j =
//   PBKDF2-HMAC-SHA256(seed, "sbx-drbg-1" || j as 8 bytes big-endian, 1, 4096 bytes), the stream
//   their concatenation), the same stream as the Python runner's (sbx_replay.py says why).
//   Without the 32-byte seed its output cannot be predicted. The crypto
//   sources (crypto.randomBytes, randomFill(Sync), randomInt, randomUUID, getRandomValues, of
//   node:crypto and of globalThis.crypto) read the stream; Math.random is a xoshiro128** (53-bit
//   doubles, like V8's own) seeded from it, as V8 seeds its own from the system otherwise.
// - The clock: every read of the time (Date.now, new Date(), Date(), performance.now,
//   process.hrtime and hrtime.bigint, process.uptime) logs the value it returns, in
//   microseconds, or in a replay returns the logged values in order. The values returned are
//   those of the log in both cases (microsecond resolution), so a record and its replay see the
//   same numbers. Timers keep their real timing (node's timers read libuv's clock).
// - The order of asynchronous deliveries: each firing of a timer the program set (the global
//   setTimeout, setInterval, setImmediate) and each tool result handed to it is an event,
//   logged in the order they happen (2 * n for the n-th timer of the execution, 2 * k + 1 for
//   its k-th tool call's result). In a replay (execute.event_log) a delivery that comes before
//   its turn is held until every event logged before it was delivered; one the log does not
//   have (any more) is never delivered: the original ended before it came. A replay that ends
//   before delivering every logged event, or is left with nothing to run but held deliveries,
//   diverged.
// - The logs go out as they grow (replay_log, before each output, each tool call and the
//   done, and every BATCH_MAX entries): a run killed later keeps what it read before anything
//   it showed. With execute.log_open (the recorded run was killed there), a read or an event
//   past the logs' ends waits forever instead of diverging: the replay is killed the same way.
// - What cannot be made deterministic, detected where cheap: worker_threads' Worker, every
//   child_process function, and fs opening /dev/urandom or /dev/random. The first reason is
//   kept; the done says replayable: false with it.
import childProcess from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import workerThreads from 'node:worker_threads';

const SEED_BYTES = 32; // SBX_SEED_BYTES
// SBX_CLOCK_READS_MAX (host-agent/protocol/limits.h): past it the log stops, and the execution
// is not replayable.
export const CLOCK_READS_MAX = 100000;
// SBX_EVENT_LOG_MAX: past it the event log stops, and the execution is not replayable.
export const EVENT_LOG_MAX = 131072;
// SBX_REPLAY_LOG_BATCH_MAX: unsent entries of either log that make a replay_log go out at
// once, so that a frame stays small.
const BATCH_MAX = 4096;
// SBX_REASON_MAX: the receiver cuts the reason at this many bytes; keep it shorter.
const REASON_MAX = 1000;
// The stream's chunks: one call into OpenSSL each (crypto.pbkdf2Sync: 128 HMAC blocks). A hash
// a block made from JavaScript cost ~200 us under TCG: crypto.randomBytes(9 << 20) took a minute.
const CHUNK_BYTES = 4096;
// The start of each chunk's salt: names the construction (sbx_replay.py's DRBG_LABEL).
const DRBG_LABEL = Buffer.from('sbx-drbg-1');
// Taken now: a program may replace node:crypto's functions (its module object is the one
// programs get), which must not change how the generator makes its stream.
const pbkdf2Sync = crypto.pbkdf2Sync;

export class ReplayDivergence extends Error {
    constructor(message) {
        super(message);
        this.name = 'ReplayDivergence';
    }
}

// The execution in progress ({drbg, log, replay, reason, divergence}), or null: outside one
// (start-up, a rehearsal, between a session's executes) nothing is logged or marked.
let current = null;

// The built-in Date (this module's own `Date` below is the one programs see).
const RealDate = globalThis.Date;
const real = {
    dateNow: RealDate.now,
    perfNow: performance.now.bind(performance),
    hrtimeBigint: process.hrtime.bigint,
    uptime: process.uptime,
};
// The timers as node made them: the runner's own use, and what the program's go through.
export const realTimers = {
    setTimeout: globalThis.setTimeout, setInterval: globalThis.setInterval,
    setImmediate: globalThis.setImmediate, clearTimeout: globalThis.clearTimeout,
    clearInterval: globalThis.clearInterval, clearImmediate: globalThis.clearImmediate,
};
// Outside an execution, or in one without a seed: the kernel's generator, as before (not
// OpenSSL's, whose state a snapshot would share: docs/snapshot.md, "Fresh identity"). Opened
// once, at start-up: an open and a close cost ~2 ms under TCG at every execute.
const urandom = fs.openSync('/dev/urandom', 'r');

// ---- the generator ----------------------------------------------------------------------------

class Drbg {
    constructor(seed) {
        this.seed = seed;
        this.chunk = 0n; // the index of the chunk in pool
        this.pool = Buffer.alloc(0); // its bytes made so far
        this.at = 0; // of pool, the bytes taken
        this.salt = Buffer.alloc(DRBG_LABEL.length + 8);
        DRBG_LABEL.copy(this.salt);
    }

    refill() {
        if (this.pool.length === CHUNK_BYTES) {
            this.chunk++;
            this.pool = Buffer.alloc(0);
            this.at = 0;
        }
        // The first draw is mostly Math.random's seed: the first block only, the rest of the
        // chunk when more is drawn (PBKDF2's blocks do not depend on the length asked for).
        const n = this.chunk === 0n && this.pool.length === 0 ? 32 : CHUNK_BYTES;
        this.salt.writeBigUInt64BE(this.chunk, DRBG_LABEL.length);
        this.pool = pbkdf2Sync(this.seed, this.salt, 1, n, 'sha256');
    }

    fill(bytes) {
        for (let done = 0; done < bytes.length;) {
            if (this.at === this.pool.length)
                this.refill();
            const n = Math.min(bytes.length - done, this.pool.length - this.at);
            bytes.set(this.pool.subarray(this.at, this.at + n), done);
            this.at += n;
            done += n;
        }
        return bytes;
    }
}

// @view's bytes (any ArrayBufferView) from the execution's generator, or the system's outside
// one.
function fillBytes(view) {
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    if (current === null || current.drbg === null)
        fs.readSync(urandom, bytes);
    else
        current.drbg.fill(bytes);
    return view;
}

// Math.random: xoshiro128**, state seeded per execution.
const rng = new Int32Array(4);
const rotl = (x, k) => (x << k) | (x >>> (32 - k));

function nextU32() {
    const r = Math.imul(rotl(Math.imul(rng[1], 5), 7), 9) >>> 0;
    const t = rng[1] << 9;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 11);
    return r;
}

// A method: named `random`, length 0, not a constructor, like the built-in.
const { random } = {
    random() {
        return ((nextU32() >>> 5) * 67108864 + (nextU32() >>> 6)) / 2 ** 53;
    },
};

function reseedMathRandom() {
    fillBytes(rng);
    if ((rng[0] | rng[1] | rng[2] | rng[3]) === 0)
        rng[0] = 1; // the one state xoshiro cannot leave
}

// ---- crypto -------------------------------------------------------------------------------

// node's own bound on a size or offset of randomBytes/randomFill (kMaxLength of a buffer's
// int32 length): the same arguments fail the same way.
const SIZE_MAX = 2 ** 31 - 1;
// Web Crypto's quota for one getRandomValues (bytes): refused above it, as the built-in does.
const GET_RANDOM_VALUES_MAX = 65536;

function checkSize(size, name) {
    if (typeof size !== 'number' || !Number.isInteger(size) || size < 0 || size > SIZE_MAX)
        throw new RangeError(`The value of "${name}" is out of range. It must be >= 0 && <= ` +
            `${SIZE_MAX}. Received ${String(size)}`);
}

function randomBytes(size, callback) {
    checkSize(size, 'size');
    const buf = fillBytes(Buffer.alloc(size));
    if (typeof callback !== 'function')
        return buf;
    process.nextTick(callback, null, buf);
    return undefined;
}

// @offset and @size count elements of a typed array (bytes of a Buffer, an ArrayBuffer), as
// node's.
function randomFillSync(buf, offset = 0, size) {
    const whole = buf instanceof ArrayBuffer || buf instanceof SharedArrayBuffer;
    const width = whole ? 1 : (buf.BYTES_PER_ELEMENT ?? 1);
    checkSize(offset, 'offset');
    const start = offset * width;
    if (size !== undefined)
        checkSize(size, 'size');
    const n = size === undefined ? buf.byteLength - start : size * width;
    if (start > buf.byteLength || start + n > buf.byteLength)
        throw new RangeError('The value of "size + offset" is out of range.');
    fillBytes(new Uint8Array(whole ? buf : buf.buffer, (whole ? 0 : buf.byteOffset) + start, n));
    return buf;
}

function randomFill(buf, ...rest) {
    const callback = rest.pop();
    if (typeof callback !== 'function')
        throw new TypeError('The "callback" argument must be of type function.');
    randomFillSync(buf, ...rest);
    process.nextTick(callback, null, buf);
}

// Uniform in [min, max), as node's: 48-bit draws, rejection sampling.
function randomInt(min, max, callback) {
    if (typeof max !== 'number' || (typeof max === 'function' && callback === undefined)) {
        callback = max;
        max = min;
        min = 0;
    }
    if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || max <= min ||
        max - min > 2 ** 48)
        throw new RangeError('randomInt: min and max must be safe integers, min < max, and ' +
            'max - min <= 2^48');
    const range = max - min;
    const limit = 2 ** 48 - (2 ** 48 % range);
    const b = Buffer.alloc(6);
    let x;
    do {
        fillBytes(b);
        x = b.readUIntBE(0, 6);
    } while (x >= limit);
    const n = min + (x % range);
    if (typeof callback !== 'function')
        return n;
    process.nextTick(callback, null, n);
    return undefined;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

function randomUUID() {
    const b = fillBytes(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => HEX[x]);
    return `${h.slice(0, 4).join('')}-${h.slice(4, 6).join('')}-${h.slice(6, 8).join('')}-` +
        `${h.slice(8, 10).join('')}-${h.slice(10).join('')}`;
}

const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array,
    Int32Array, Uint32Array, BigInt64Array, BigUint64Array];

function getRandomValues(array) {
    if (!INTEGER_ARRAYS.some((t) => array instanceof t) &&
        !(array instanceof Buffer))
        throw new DOMException('The data argument must be an integer-type TypedArray',
            'TypeMismatchError');
    if (array.byteLength > GET_RANDOM_VALUES_MAX)
        throw new DOMException(`The ArrayBufferView's byte length (${array.byteLength}) exceeds ` +
            'the number of bytes of entropy available via this API (65536)',
        'QuotaExceededError');
    return fillBytes(array);
}

// ---- the clock ----------------------------------------------------------------------------

// One read: @realUs() (the real clock, in µs, called only outside a replay) or the replayed
// value; the value logged.
function read(realUs) {
    const s = current;
    if (s === null)
        return realUs();
    if (s.replay !== null) {
        if (s.log.length >= s.replay.length) {
            if (s.logOpen)
                waitForever();
            const why = `clock read ${s.log.length + 1} is past the end of the recorded log ` +
                `(${s.replay.length} reads)`;
            s.divergence ??= why;
            throw new ReplayDivergence(why);
        }
        const v = s.replay[s.log.length];
        push(s, s.log, v, s.sent);
        return v;
    }
    const v = realUs();
    if (s.log.length < CLOCK_READS_MAX)
        push(s, s.log, v, s.sent);
    else
        mark(`too many clock reads (more than ${CLOCK_READS_MAX})`);
    return v;
}

// @v onto @log (the clock's or the events', @sent of it sent): a batch full goes out.
function push(s, log, v, sent) {
    log.push(v);
    if (log.length - sent >= BATCH_MAX)
        flush();
}

// The recorded run was killed here (log_open): so is this one, by its own timeout. The thread
// blocks (no callback, no output, nothing more happens), as the original's did not go on.
const blocker = new Int32Array(new SharedArrayBuffer(4));
function waitForever() {
    for (;;)
        Atomics.wait(blocker, 0, 0);
}

const wallUs = () => real.dateNow() * 1000;
const perfUs = () => Math.round(real.perfNow() * 1000);
const monoUs = () => Number(real.hrtimeBigint() / 1000n);

function now() {
    return Math.floor(read(wallUs) / 1000);
}

// Date as a function: `new Date()` and `Date()` read the clock, every other form is the real
// one's. Same prototype, so instanceof and every method work as before. Named Date, in a scope
// of its own (this module's `Date` is the built-in).
const SbxDate = (() => function Date(...args) {
    if (new.target === undefined)
        return new RealDate(now()).toString();
    return Reflect.construct(RealDate, args.length === 0 ? [now()] : args, new.target);
})();

function hrtime(previous) {
    const us = read(monoUs);
    let s = Math.floor(us / 1e6);
    let ns = (us % 1e6) * 1000;
    if (previous !== undefined) {
        s -= previous[0];
        ns -= previous[1];
        if (ns < 0) {
            s -= 1;
            ns += 1e9;
        }
    }
    return [s, ns];
}
hrtime.bigint = () => BigInt(read(monoUs)) * 1000n;

// ---- the order of deliveries -------------------------------------------------------------

// Where replay_log messages go (the runner's channel), set once by the runner.
let sink = null;
export function setSink(f) {
    sink = f;
}

// The entries not sent yet (and the reason, once) as a replay_log message, or null: nothing new.
export function takeLog() {
    const s = current;
    if (s === null || s.quiet)
        return null;
    const reason = s.reason !== null && !s.reasonSent;
    if (s.log.length === s.sent && s.events.length === s.eventsSent && !reason)
        return null;
    const m = { type: 'replay_log', id: s.id };
    if (s.log.length > s.sent) {
        m.clock = s.log.slice(s.sent);
        s.sent = s.log.length;
    }
    if (s.events.length > s.eventsSent) {
        m.events = s.events.slice(s.eventsSent);
        s.eventsSent = s.events.length;
    }
    if (reason) {
        m.not_replayable = s.reason;
        s.reasonSent = true;
    }
    return m;
}

// Send what is new of the logs now (before an output, a call, the done; a batch full).
export function flush() {
    const m = takeLog();
    if (m !== null && sink !== null)
        sink(m);
}

// The event of the result of a call made now: {s: the execution, ev: 2 * k + 1 for its k-th
// call (from 1)}; null outside an execution.
export function callEvent() {
    return current === null ? null : { s: current, ev: 2 * ++current.calls + 1 };
}

function logEvent(s, ev) {
    if (s.events.length < EVENT_LOG_MAX)
        push(s, s.events, ev, s.eventsSent);
    else
        mark(`too many events (more than ${EVENT_LOG_MAX})`);
}

// The delivery @tag ({s, ev}: the event ev of the execution s) happens now: @run() does it.
// Logged in a record; in a replay done at its turn, held until then, or never when the log has
// it no more. @owner: the timer (one held firing at most each; a cleared timer's is dropped).
export function deliver(tag, run, owner) {
    // Outside the execution that made it (a session's earlier one), or after its program ended
    // (the runner is only sending the done): as it comes, not logged.
    if (tag === null || tag.s !== current || tag.s.ending)
        return run();
    const { s, ev } = tag;
    const r = s.order;
    if (r === null) {
        logEvent(s, ev);
        return run();
    }
    if (r.pos < r.log.length && r.log[r.pos] === ev) {
        take(s, r, ev);
        return run();
    }
    let held = r.held.get(ev);
    const waiting = held?.length ?? 0;
    if ((r.left.get(ev) ?? 0) > waiting) {
        if (owner !== undefined && held?.some((h) => h.owner === owner))
            return undefined; // an interval's next firing while one is held: that one will do
        if (held === undefined)
            r.held.set(ev, held = []);
        held.push({ run, owner });
        return undefined;
    }
    // Not in what is left of the log: the original ended (or was killed) before it came, so it
    // is never delivered. Killed (log_open): the process stays (a timer keeps the loop alive)
    // until the replay is killed the same way.
    if (s.logOpen)
        r.parked ??= realTimers.setInterval(() => {}, 2 ** 30);
    return undefined;
}

function take(s, r, ev) {
    s.events.push(ev);
    r.pos++;
    r.left.set(ev, r.left.get(ev) - 1);
    if (r.pos < r.log.length && r.held.has(r.log[r.pos]))
        realTimers.setImmediate(release, s); // after this delivery's microtasks
}

// The next event in the log was held: deliver it now.
function release(s) {
    const r = s.order;
    if (current !== s || r.pos >= r.log.length)
        return;
    const ev = r.log[r.pos];
    const held = r.held.get(ev);
    if (held === undefined)
        return;
    const h = held.shift();
    if (held.length === 0)
        r.held.delete(ev);
    if (h.owner !== undefined && cleared.has(h.owner)) {
        release(s);
        return;
    }
    take(s, r, ev);
    try {
        h.run();
    } catch (e) {
        process.nextTick(() => { throw e; }); // as the timer's own throw: uncaught
    }
}

// The program's value is settled: what is delivered from now on (while the runner flushes and
// sends the done) is not the program's to order, and a replay need not deliver it before its
// own end.
export function ending() {
    if (current !== null)
        current.ending = true;
}

// Nothing is left to run, and the log has deliveries still to come: they never came. The
// divergence's error, or null when none is missing.
export function stuck() {
    const s = current;
    const r = s?.order;
    if (!r || r.pos >= r.log.length || s.logOpen)
        return null;
    const why = `the recorded event ${r.log[r.pos]} (delivery ${r.pos + 1} of ` +
        `${r.log.length}) never came: nothing is left to run`;
    s.divergence ??= why;
    return new ReplayDivergence(why);
}

// Timers the program cleared (a held firing of one is dropped). A set beside them: a property
// on node's Timeout objects would change their shape, and node's own code that reads them.
const cleared = new WeakSet();

function wrapTimer(name, clearName) {
    const set = realTimers[name];
    const clear = realTimers[clearName];
    const wrapped = { [name](callback, ...rest) {
        const s = current;
        if (s === null || typeof callback !== 'function')
            return set(callback, ...rest);
        const tag = { s, ev: 2 * ++s.timers };
        let timer = null;
        timer = set(function (...args) {
            return deliver(tag, () => callback.apply(this, args), timer);
        }, ...rest);
        return timer;
    } }[name];
    for (const key of Reflect.ownKeys(set))
        if (!['length', 'name', 'prototype'].includes(key))
            Object.defineProperty(wrapped, key, Object.getOwnPropertyDescriptor(set, key));
    define(globalThis, name, wrapped);
    define(globalThis, clearName, { [clearName](timer) {
        if (timer !== null && typeof timer === 'object' && current !== null)
            cleared.add(timer);
        return clear(timer);
    } }[clearName]);
}

// ---- what cannot be replayed --------------------------------------------------------------

export function mark(why) {
    if (current !== null && current.reason === null)
        current.reason = why.slice(0, REASON_MAX);
}

function wrapAll(module, names, why) {
    for (const name of names) {
        const f = module[name];
        if (typeof f !== 'function')
            continue;
        module[name] = { [name](...args) {
            mark(why(name));
            return f.apply(this, args);
        } }[name];
    }
}

const DEVICES = new Set(['/dev/urandom', '/dev/random']);

function checkPath(path) {
    if (current === null)
        return;
    let p = path;
    if (p instanceof URL)
        p = p.pathname;
    else if (Buffer.isBuffer(p))
        p = p.toString();
    if (typeof p !== 'string' || !p.includes('random'))
        return;
    try {
        p = fs.realpathSync(p);
    } catch {
        return;
    }
    if (DEVICES.has(p))
        mark(`the program opened ${p} (its bytes are not recorded)`);
}

function wrapPaths(module, names) {
    for (const name of names) {
        const f = module[name];
        if (typeof f !== 'function')
            continue;
        module[name] = { [name](path, ...args) {
            checkPath(path);
            return f.call(this, path, ...args);
        } }[name];
    }
}

// ---- installing, and an execution's start and end -----------------------------------------

function define(object, name, value) {
    Object.defineProperty(object, name,
        { value, writable: true, enumerable: false, configurable: true });
}

// Route every source above through this module, once, at the runner's start.
export function install() {
    define(Math, 'random', random);
    for (const [k, v] of Object.entries(Object.getOwnPropertyDescriptors(RealDate)))
        if (k !== 'prototype' && k !== 'name')
            Object.defineProperty(SbxDate, k, v);
    Object.defineProperty(SbxDate, 'prototype', { value: RealDate.prototype, writable: false });
    define(SbxDate, 'now', { now() { return now(); } }.now);
    define(RealDate.prototype, 'constructor', SbxDate);
    define(globalThis, 'Date', SbxDate);
    define(performance, 'now', { now() { return read(perfUs) / 1000; } }.now);
    define(process, 'hrtime', hrtime);
    define(process, 'uptime', { uptime() { return read(() => Math.round(real.uptime() * 1e6)) /
        1e6; } }.uptime);
    wrapTimer('setTimeout', 'clearTimeout');
    wrapTimer('setInterval', 'clearInterval');
    wrapTimer('setImmediate', 'clearImmediate');
    for (const [name, f] of Object.entries({ randomBytes, randomFillSync, randomFill, randomInt,
        randomUUID, pseudoRandomBytes: randomBytes, prng: randomBytes,
        rng: randomBytes }))
        crypto[name] = f;
    // node:crypto's getRandomValues (a getter, not configurable) calls webcrypto's.
    const web = crypto.webcrypto;
    define(web, 'getRandomValues', getRandomValues);
    define(web, 'randomUUID', randomUUID);
    wrapAll(childProcess, ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile',
        'execFileSync', 'fork'], (name) => `a process was started (child_process.${name})`);
    const { Worker } = workerThreads;
    workerThreads.Worker = class extends Worker {
        constructor(...args) {
            mark('a thread was started (worker_threads.Worker)');
            super(...args);
        }
    };
    wrapPaths(fs, ['open', 'openSync', 'readFile', 'readFileSync', 'createReadStream']);
    wrapPaths(fs.promises, ['open', 'readFile']);
    syncBuiltinESMExports();
    reseedMathRandom();
}

function seedOf(text) {
    if (typeof text !== 'string' || !/^[A-Za-z0-9+/]{43}=$/.test(text))
        return null;
    const seed = Buffer.from(text, 'base64');
    return seed.length === SEED_BYTES ? seed : null;
}

function logOf(v) {
    if (v === undefined || v === null)
        return null;
    // The agent checked it: anything else diverges at its first use.
    return Array.isArray(v) && v.every((e) => Number.isSafeInteger(e) && e >= 0) ? v : [];
}

// A replay's event order: the log, where it is, and how many of each event are left.
function orderOf(log) {
    if (log === null)
        return null;
    const left = new Map();
    for (const ev of log)
        left.set(ev, (left.get(ev) ?? 0) + 1);
    return { log, pos: 0, left, held: new Map() };
}

// The execution of @x starts: its generator from its seed, its clock log (or the one it
// replays), its event order (or the one it keeps), Math.random seeded from it. @quiet: a
// rehearsal, whose logs go nowhere. An execute without a seed (an older host, which would not
// know replay_log) is not replayable: its logs go in the done only, as before.
export function begin(x, quiet = false) {
    const seed = seedOf(x.seed);
    current = { id: x.id, quiet: quiet || seed === null,
        drbg: seed === null ? null : new Drbg(seed), log: [], sent: 0,
        replay: logOf(x.clock_log), events: [], eventsSent: 0, order: orderOf(logOf(x.event_log)),
        logOpen: x.log_open === true, timers: 0, calls: 0, reasonSent: false, ending: false,
        reason: seed === null ? 'the execute had no seed' : null, divergence: null };
    reseedMathRandom();
}

// The execution is over: the done's replay members (docs/protocol.md, "Replay": the clock
// reads not sent yet, the verdict), what else of the logs is new (a replay_log to send before
// the done, or null), and the divergence, if any (a message); the real sources back.
export function end() {
    const s = current;
    if (s === null)
        return { fields: {}, tail: null, divergence: null };
    const clock = s.log.slice(s.sent);
    s.sent = s.log.length;
    const r = s.order;
    if (r !== null && r.pos < r.log.length && !s.logOpen)
        s.divergence ??= `the replay ended after ${r.pos} of the ${r.log.length} recorded ` +
            'deliveries (timers, tool results)';
    const tail = takeLog();
    current = null;
    const fields = { clock_log: clock, replayable: s.reason === null };
    if (s.reason !== null)
        fields.not_replayable = s.reason;
    return { fields, tail, divergence: s.divergence };
}
