// The JavaScript runner: runs one execution's code in node, started by the guest agent with
// the runner channel on fd 3 (docs/protocol.md, "Runner channel").
//
// It reads `execute`, runs the code as an async function (see rewrite.mjs), answers tool calls
// through the channel, and ends with one `done` {status: ok|error, result?, error?} and exit.
//
// The agent may start it long before its execute (pre-started, and saved in a VM snapshot): it
// first runs a warm-up through the same code path, then answers the agent's `ping` with `pong`
// (it is warm), and waits. At the execute it reseeds Math.random() from the kernel, which
// every clone of the snapshot has reseeded at its hello (see warmUp and reseedMathRandom).
import fs from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import vm from 'node:vm';

import { Channel, encode, FRAME_MAX } from './channel.mjs';
import { SerializationError, toJson } from './json.mjs';
import { HELPER, rewrite } from './rewrite.mjs';
import { makeTools, PolicyDenied, SandboxToolError, ToolError, toolError, ValidationError }
    from './tools.mjs';

const FILENAME = 'main.js';
// SBX_ERROR_TEXT_MAX: longer error messages and stacks are cut.
const ERROR_TEXT_MAX = 16 * 1024;
const RUNNER_DIR = new URL('.', import.meta.url).pathname;

let execId = null;
let finished = false;
let nextCallId = 1;
const pending = new Map(); // call id -> {resolve, reject, site}

// SBX_TOOL_CALLS_IN_FLIGHT_MAX in host-agent/protocol/limits.h: the agent refuses a call beyond
// it. Calls beyond wait here, in the program's own memory, and go out as answers come back, so
// Promise.all over any number of calls just works.
const CALLS_IN_FLIGHT_MAX = 64;
const CALL_ID_MAX = 4294967295; // the widest id, to size a queued call's frame
const queued = []; // {provider, tool, text, resolve, reject, site}, in call order

let channel = null; // created once warm (the end of this file)

// A second ping comes when the host's hello asks for a warm-up: a pooled VM restored from a
// snapshot, whose emulator (TCG) lost its translated code. Warm up again, then pong: the agent
// answers the hello only then, so no execute comes meanwhile (one that does still waits for
// the warm-up; the delay lets it skip it).
const REWARM_DELAY_MS = 0;

let warm = Promise.resolve(); // the warm-up in progress: an execute waits for it
let warming = false; // whether one is in progress (else the execute starts at once: ~4 ms)
let rewarmTimer = null;
let pings = 0;

function onMessage(msg) {
    if (msg.type === 'execute' && execId === null) {
        execId = msg.id;
        channel.ref(false);
        clearTimeout(rewarmTimer);
        const start = () => {
            reseedMathRandom();
            run(msg).then(succeed, fail);
        };
        if (warming)
            warm.then(start);
        else
            start();
    } else if (msg.type === 'tool_result') {
        settle(msg);
    } else if (msg.type === 'ping' && execId === null) {
        // The first ping asks whether we are warm: we are, the channel is read only after the
        // warm-up. Both pongs are awaited by the agent (the second: before its hello_ok).
        const pong = () => channel.send(encode({ type: 'pong', seq: msg.seq }));
        if (pings++ === 0) {
            pong();
            return;
        }
        clearTimeout(rewarmTimer);
        rewarmTimer = setTimeout(() => {
            if (execId === null) {
                warming = true;
                warm = warm.then(warmUp).then(warmOutput).then(() => {
                    warming = false;
                    pong();
                });
            }
        }, REWARM_DELAY_MS);
    }
}

// --- fresh randomness ----------------------------------------------------------------------

// V8 keeps Math.random()'s state in the context and seeds new contexts from the isolate's own
// generator: both are cloned with a snapshot, and JavaScript cannot reseed either. So the
// runner installs its own generator (xoshiro128**, 53-bit doubles like V8's), seeded at the
// execute from the kernel (reseeded by the agent at hello). crypto needs nothing here: OpenSSL
// reseeds itself after a restore (agent.h, PRESTART_CLOCK_US).
// Opened once, at start-up: an open and a close cost ~2 ms under TCG at every execute.
const urandom = fs.openSync('/dev/urandom', 'r');

function reseedMathRandom() {
    const s = new Int32Array(4);
    fs.readSync(urandom, s);
    if ((s[0] | s[1] | s[2] | s[3]) === 0)
        s[0] = 1; // the one state xoshiro cannot leave
    let [s0, s1, s2, s3] = s;
    const rotl = (x, k) => (x << k) | (x >>> (32 - k));
    const next = () => {
        const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
        const t = s1 << 9;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = rotl(s3, 11);
        return r;
    };
    // A method: named `random`, length 0, not a constructor, like the built-in.
    const { random } = {
        random() {
            return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 2 ** 53;
        },
    };
    Object.defineProperty(Math, 'random',
        { value: random, writable: true, enumerable: false, configurable: true });
}

// --- tools ---------------------------------------------------------------------------------

function callTool(provider, tool, input, site) {
    let text;
    try {
        text = toJson(input, 'input');
    } catch (e) {
        return Promise.reject(e);
    }
    text ??= '{}';
    // Ids go out in increasing order (the agent requires it): a queued call takes its id when
    // it is sent, and its size is checked now with the widest id.
    const full = pending.size >= CALLS_IN_FLIGHT_MAX;
    const frame = callFrame(full ? CALL_ID_MAX : nextCallId, provider, tool, text);
    if (!frame)
        return Promise.reject(new SerializationError(
            `input of ${provider}.${tool} is too large (a message is at most ${FRAME_MAX} bytes)`));
    return new Promise((resolve, reject) => {
        const call = { provider, tool, text, resolve, reject, site };
        if (full)
            queued.push(call);
        else
            sendCall(call, frame);
    });
}

function callFrame(callId, provider, tool, text) {
    return encode({ type: 'tool_call', id: execId, call_id: callId, provider, tool }, 'input',
        text);
}

function sendCall(call, frame) {
    const callId = nextCallId++;
    pending.set(callId, call);
    channel.ref(true);
    channel.send(frame ?? callFrame(callId, call.provider, call.tool, call.text));
}

function settle(msg) {
    const call = pending.get(msg.call_id);
    if (!call)
        return;
    pending.delete(msg.call_id);
    if (queued.length > 0)
        sendCall(queued.shift());
    if (pending.size === 0)
        channel.ref(false);
    if (msg.ok)
        call.resolve(msg.result);
    else
        call.reject(toolError(msg.error, call.site));
}

// --- running the code ----------------------------------------------------------------------

const userRequire = createRequire(`${process.cwd()}/`);

// import() for user code: builtins as they are, packages resolved like require() from cwd.
function importForUser(spec) {
    if (isBuiltin(spec) || spec.startsWith('file:'))
        return import(spec);
    return import(pathToFileURL(userRequire.resolve(spec)).href);
}

const PARAMS = ['tools', 'require', 'module', 'exports', '__filename', '__dirname',
    'SandboxToolError', 'ToolError', 'ValidationError', 'PolicyDenied', HELPER];

// The user's code sits in a block of its own, so it may declare names like `tools` again.
function compile(body) {
    const source = `(async function (${PARAMS.join(', ')}) {{\n${body}\n}})`;
    return new vm.Script(source, { filename: FILENAME, lineOffset: -1 }).runInThisContext();
}

async function run(x) {
    if (x.entry && !/^[A-Za-z_$][\w$]*$/.test(x.entry))
        throw new TypeError(`entry ${JSON.stringify(x.entry)} is not an identifier`);
    const { body } = rewrite(x.code, x.entry, FILENAME);
    const fn = compile(body);
    const module = { exports: {} };
    const value = await fn(makeTools(x.tools, callTool), userRequire, module, module.exports,
        `${process.cwd()}/${FILENAME}`, process.cwd(), SandboxToolError, ToolError,
        ValidationError, PolicyDenied, { import: importForUser });
    if (!x.entry)
        return value;
    if (typeof value !== 'function')
        throw new ReferenceError(`entry function ${x.entry} is not defined by the code`);
    return value(...(x.args ?? []));
}

// --- reporting -----------------------------------------------------------------------------

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

// Text the protocol accepts: no NUL, no lone surrogate, at most ERROR_TEXT_MAX bytes.
function text(value) {
    const s = String(value).replaceAll('\0', '\\0').replace(LONE_SURROGATE, '\uFFFD');
    if (Buffer.byteLength(s) <= ERROR_TEXT_MAX)
        return s;
    return Buffer.from(s).subarray(0, ERROR_TEXT_MAX - 3).toString();
}

// Stack lines of the runner and of node's internals say nothing about the user's code.
function userStack(stack) {
    return stack.split('\n')
        .filter((l) => !l.includes(RUNNER_DIR) && !/^\s+at (.*\()?node:/.test(l))
        .join('\n');
}

function describe(e) {
    const code = e instanceof SerializationError ? 'serialization_error' : 'runtime_error';
    if (!(e instanceof Error)) {
        const type = e === null ? 'null' : typeof e === 'object' ? 'Object' : typeof e;
        let shown;
        try {
            shown = typeof e === 'string' ? e : JSON.stringify(e);
        } catch {
            shown = '(not printable)';
        }
        return { code, type, message: text(`uncaught ${type}: ${shown}`) };
    }
    const error = { code, type: text(e.name || 'Error').slice(0, 128), message: text(e.message) };
    if (typeof e.stack === 'string' && e.stack)
        error.stack = text(userStack(e.stack));
    return error;
}

// Writes to pipes are synchronous on Linux: with nothing buffered there is nothing to wait for
// (and a write's callback costs an event-loop turn, ~5 ms under TCG).
function flush(stream) {
    if (stream.writableLength === 0)
        return Promise.resolve();
    return new Promise((resolve) => stream.write('', () => resolve()));
}

function doneMessage(status, exitCode, extra) {
    return { type: 'done', id: execId, status, ...extra, exit_code: exitCode, duration_ms: 0,
        output_truncated: false };
}

// Send the one done (with @json as its result, if any), after all output, and exit.
async function finish(done, json) {
    if (finished)
        return;
    finished = true;
    // A promise rejected without a handler surfaces after the microtasks: let it, and let it
    // turn a success into the error node itself would have died of.
    await new Promise((resolve) => setImmediate(resolve));
    if (uncaught !== null && done.status === 'ok') {
        done = doneMessage('error', 1, { error: describe(uncaught.error) });
        json = undefined;
    }
    await Promise.all([flush(process.stdout), flush(process.stderr)]);
    let frame = encode(done, 'result', json);
    if (!frame) {
        const e = new SerializationError(`result is too large (${json.length} characters of ` +
            `JSON; a message is at most ${FRAME_MAX} bytes)`);
        done = doneMessage('error', 1, { error: describe(e) });
        frame = encode(done);
    }
    await channel.send(frame);
    process.exit(done.exit_code);
}

function fail(e) {
    return finish(doneMessage('error', 1, { error: describe(e) }));
}

function succeed(value) {
    let json;
    try {
        json = toJson(value, 'result');
    } catch (e) {
        if (e instanceof SerializationError)
            e.stack = ''; // the runner's frames: the message says where in the result
        return fail(e);
    }
    return finish(doneMessage('ok', 0), json);
}

// The first error no code caught: an exception in a callback, a rejection nobody handled.
let uncaught = null;
function onUncaught(error) {
    uncaught ??= { error };
    fail(error);
}
process.on('uncaughtException', onUncaught);
process.on('unhandledRejection', onUncaught);
// Nothing left to run, yet the code has not finished: it awaits something that never settles.
process.on('beforeExit', () => {
    if (execId !== null && !finished)
        fail(new Error('the code awaits a promise that can never settle (nothing is left to run)'));
});

// --- warm-up, then wait for the execute ----------------------------------------------------

// Parsed, rewritten and run like user code, so that acorn, the rewriter, the serialiser and
// the paths of a first execution are loaded and compiled before the agent is told we are warm.
// It must not write a byte (the agent discards what a waiting runner wrote, but a cold boot
// may hand the execute over before the warm-up is done) nor draw random numbers from crypto.
const WARMUP_CODE = `import path from 'node:path';
const xs = [3, 1, 2].map((x) => x * 2).sort();
const o = { xs, s: \`\${path.basename('/a/b.js')} \${xs.length}\`, n: 1.5, t: true, z: null };
JSON.stringify(o);
o`;

async function warmUp() {
    try {
        const value = await run({ id: 'warmup', code: WARMUP_CODE,
            tools: [{ provider: 'warm', name: 'up' }] });
        toJson(value, 'result');
        describe(new TypeError('warm-up'));
        // console.log's formatting, into nowhere; then the real streams, without a byte.
        const sink = new Writable({ write(chunk, encoding, callback) { callback(); } });
        new console.Console(sink, sink).log('%s %d', 'warm', 1, { a: [1] });
        await Promise.all([flush(process.stdout), flush(process.stderr)]);
        // The paths of an execute's start and end: reseeding (again at the execute), a done.
        reseedMathRandom();
        encode(doneMessage('ok', 0), 'result', toJson(value, 'result'));
    } catch {
        // Nothing to report to yet; a real execution will show what is broken.
    }
}

// After a restore (the second ping) the real output paths too: the global console and the
// process streams into the pipes of the execution to come, whose first write otherwise pays for
// translating node's, the kernel's and the agent's output paths. The agent reads these bytes
// and drops them when our pong comes (it waits for the pong before it hands us an execute).
function warmOutput() {
    console.log('%s %d', 'warm', 1, { a: [1] });
    console.error('warm');
    process.stdout.write('warm\n');
}

await warmUp();
channel = new Channel(3, onMessage, () => {
    // The agent is gone: nobody is left to report to.
    if (!finished)
        process.exit(70);
});
