// The JavaScript runner: runs one execution's code in node, started by the guest agent with
// the runner channel on fd 3 (docs/protocol.md, "Runner channel").
//
// It reads `execute`, runs the code as an async function (see rewrite.mjs; TypeScript, language
// "typescript", has its types stripped first: typescript.mjs), answers tool calls through the
// channel, and ends with one `done` {status: ok|error, result?, error?}; then it waits for the
// agent to end it (see deliver). In a session (execute.keep) it stays instead, with its
// globals, and runs the next execute the agent hands it (see keepAfter).
//
// The agent may start it long before its execute (pre-started, and saved in a VM snapshot): it
// first rehearses an execution end to end (see rehearse), then answers the agent's `ping` with
// `pong` (it is warm), and waits. At the execute its randomness is seeded by the execute's seed
// and its clock reads are logged (or replayed): replay.mjs.
import fs from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import vm from 'node:vm';

import { Channel, encode, FRAME_MAX, readFrameSync, waitForCloseSync, writeFrameSync }
    from './channel.mjs';
import { SerializationError, toJson } from './json.mjs';
import * as replay from './replay.mjs';
import { HELPER, rewrite } from './rewrite.mjs';
import { makeTools, PolicyDenied, SandboxToolError, ToolError, toolError, ValidationError }
    from './tools.mjs';
import { loadTypeScript, stripTypes } from './typescript.mjs';

// The user's code as stacks name it, by language.
const FILENAMES = { javascript: 'main.js', typescript: 'main.ts' };
const CHANNEL_FD = 3;
// SBX_ERROR_TEXT_MAX: longer error messages and stacks are cut.
const ERROR_TEXT_MAX = 16 * 1024;
const RUNNER_DIR = new URL('.', import.meta.url).pathname;

// The execution in progress (a rehearsal's or the real one): {id, finished, deliver}, where
// deliver(frame, exitCode) hands its done over. Null while waiting.
let current = null;
let nextCallId = 1;
const pending = new Map(); // call id -> {resolve, reject, site}

// SBX_TOOL_CALLS_IN_FLIGHT_MAX in host-agent/protocol/limits.h: the agent refuses a call beyond
// it. Calls beyond wait here, in the program's own memory, and go out as answers come back, so
// Promise.all over any number of calls just works.
const CALLS_IN_FLIGHT_MAX = 64;
const CALL_ID_MAX = 4294967295; // the widest id, to size a queued call's frame
const queued = []; // {provider, tool, text, resolve, reject, site}, in call order

// Opened at the first tool call (see channel.mjs): until then fd 3 is used with blocking calls.
let channel = null;
// Set once the done is handed over: the runner then only waits to be killed (see deliver).
let exitCode = null;

function openChannel() {
    channel = new Channel(CHANNEL_FD, (msg) => {
        if (msg.type === 'tool_result')
            settle(msg);
        else if (msg.type === 'execute' && current !== null && current.finished)
            execute(msg, deliver); // a session's next execute (see keepAfter)
    }, () => {
        // The agent closed the channel: after our done, as it should; before it, it is gone
        // and nobody is left to report to.
        process.exit(exitCode ?? 70);
    });
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
        const call = { provider, tool, text, resolve, reject, site, ev: replay.callEvent() };
        if (full)
            queued.push(call);
        else
            sendCall(call, frame);
    });
}

// A tool_call's frame; @log (a replay_log, optional): its entries as the call's members.
function callFrame(callId, provider, tool, text, log) {
    const head = { type: 'tool_call', id: current.id, call_id: callId, provider, tool };
    if (log) {
        for (const k of ['clock', 'events', 'not_replayable'])
            if (log[k] !== undefined)
                head[k] = log[k];
    }
    return encode(head, 'input', text);
}

function sendCall(call, frame) {
    const callId = nextCallId++;
    pending.set(callId, call);
    if (!channel)
        openChannel();
    channel.ref(true);
    // What the program read before the call (replay.mjs) rides in the call's frame: one frame
    // less a call for the agent and the host; a call too large for both, in a frame before it.
    const log = replay.takeLog();
    const withLog = log === null ? null : callFrame(callId, call.provider, call.tool, call.text,
        log);
    frame ??= callFrame(callId, call.provider, call.tool, call.text);
    channel.send(log === null ? frame : withLog ?? Buffer.concat([encode(log), frame]));
}

// A replay_log (replay.mjs) out now, before whatever the runner sends next.
function sendLog(msg) {
    const frame = encode(msg);
    if (frame === null)
        return; // cannot be: a batch is at most a few thousand integers
    if (channel)
        channel.send(frame);
    else
        writeFrameSync(CHANNEL_FD, frame);
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
    // In the order recorded, in a replay (replay.mjs): maybe held till its turn.
    replay.deliver(call.ev, () => (msg.ok ? call.resolve(msg.result)
        : call.reject(toolError(msg.error, call.site))));
}

// A session's calls still waiting when its execute ended: nobody will answer them now (the
// agent drops late results), so they fail, and their ids stop counting against the limit.
function abandonCalls() {
    const gone = { code: 'tool_error', message: 'the execution that made this call is over' };
    for (const call of [...pending.values(), ...queued])
        call.reject(toolError(gone, call.site));
    pending.clear();
    queued.length = 0;
}

// --- running the code ----------------------------------------------------------------------

// The entry cannot be called as asked: a validation_error whose type says why
// (EntryNotFound, TypeError).
class EntryError extends Error {
    constructor(type, message) {
        super(message);
        this.name = type;
    }
}

// A session's `tools`: one object for all its cells, whose providers each execute replaces, so
// that a function of an earlier cell calls the tools of the execute running it.
const sessionTools = Object.create(null);

// The execute's tools: each call is the execute's, and refused once it is over (a session's
// runner goes on; a later execute has tools of its own).
function toolsFor(x) {
    const exe = current;
    const tools = makeTools(x.tools, (provider, tool, input, site) => (exe.finished
        ? Promise.reject(toolError({ code: 'tool_error',
            message: `${provider}.${tool}: the execution that made this call is over` }, site))
        : callTool(provider, tool, input, site)));
    if (!x.keep)
        return tools;
    for (const p of Object.keys(sessionTools))
        delete sessionTools[p];
    return Object.assign(sessionTools, tools);
}

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
// @prologue runs first, on the wrapper's line (the user's lines keep their numbers).
function compile(body, prologue, filename) {
    const source = `(async function (${PARAMS.join(', ')}) {{${prologue}\n${body}\n}})`;
    return new vm.Script(source, { filename, lineOffset: -1 }).runInThisContext();
}

async function run(x) {
    if (x.entry && !/^[A-Za-z_$][\w$]*$/.test(x.entry))
        throw new TypeError(`entry ${JSON.stringify(x.entry)} is not an identifier`);
    // Refused before the code runs: nothing of it happens.
    if (x.entry && x.kwargs && Object.keys(x.kwargs).length > 0)
        throw new EntryError('TypeError', 'kwargs: JavaScript functions take positional ' +
            'arguments only');
    const filename = FILENAMES[x.language] ?? FILENAMES.javascript;
    // TypeScript: types blanked out in place (same lines and columns), then the same path.
    const code = x.language === 'typescript' ? stripTypes(x.code, filename) : x.code;
    const { body, prologue } = rewrite(code, x.entry, filename, x.keep === true);
    const fn = compile(body, prologue, filename);
    const module = { exports: {} };
    const value = await fn(toolsFor(x), userRequire, module, module.exports,
        `${process.cwd()}/${filename}`, process.cwd(), SandboxToolError, ToolError,
        ValidationError, PolicyDenied, { import: importForUser });
    if (!x.entry)
        return value;
    if (typeof value !== 'function')
        throw new EntryError('EntryNotFound', value === undefined
            ? `entry ${x.entry}: no function of that name is defined`
            : `entry ${x.entry} is not a function (it is ${typeof value})`);
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
    if (e instanceof EntryError)
        return { code: 'validation_error', type: e.name, message: text(e.message) };
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
    return { type: 'done', id: current.id, status, ...extra, exit_code: exitCode, duration_ms: 0,
        output_truncated: false };
}

// Hand over the one done (with @json as its result, if any) after all output, to the
// execution's deliver (a rehearsal's drops it).
async function finish(done, json) {
    const exe = current;
    if (exe === null || exe.finished)
        return;
    exe.finished = true;
    replay.ending();
    // A promise rejected without a handler surfaces after the microtasks: let it, and let it
    // turn a success into the error node itself would have died of.
    await new Promise((resolve) => replay.realTimers.setImmediate(resolve));
    if ('uncaught' in exe && done.status === 'ok') {
        done = doneMessage('error', 1, { error: describe(exe.uncaught) });
        json = undefined;
    }
    await Promise.all([flush(process.stdout), flush(process.stderr)]);
    const { fields, tail, divergence } = replay.end();
    if (tail !== null && exe.deliver === deliver)
        sendLog(tail); // the events and reason not sent yet; the clock's go in the done
    if (divergence !== null) {
        // Even when the program caught the ReplayDivergence: the replay went elsewhere.
        done = doneMessage('error', 1, { error: { code: 'replay_divergence',
            type: 'ReplayDivergence', message: text(divergence) } });
        json = undefined;
    }
    let frame = encode({ ...done, ...fields }, 'result', json);
    if (!frame && fields.clock_log?.length > 0)
        frame = encode({ ...done, ...fields, clock_log: [], replayable: false, not_replayable:
            'the clock log did not fit in the done message beside the result' }, 'result', json);
    if (!frame) {
        const e = new SerializationError(`result is too large (${json.length} characters of ` +
            `JSON; a message is at most ${FRAME_MAX} bytes)`);
        done = doneMessage('error', 1, { error: describe(e) });
        frame = encode({ ...done, ...fields }) ?? encode(done);
    }
    await exe.deliver(frame, done.exit_code);
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

// The first error no code caught: an exception in a callback, a rejection nobody handled. Out
// of an execution (a broken runner), there is nobody to tell: exit, the agent sees it.
function onUncaught(error) {
    if (current === null)
        process.exit(70);
    if (!('uncaught' in current))
        current.uncaught = error;
    fail(error);
}
process.on('uncaughtException', onUncaught);
process.on('unhandledRejection', onUncaught);
// Nothing left to run, yet the code has not finished: it awaits something that never settles.
process.on('beforeExit', () => {
    if (current !== null && !current.finished)
        fail(replay.stuck() ??
            new Error('the code awaits a promise that can never settle (nothing is left to run)'));
});

// --- rehearsals, then wait for the execute ------------------------------------------------

// Run by the rehearsals like user code, so that acorn, the rewriter, the serialiser and the
// paths of an execution are loaded, compiled and (under TCG) translated before the agent is
// told we are warm. WARMUP_CODE writes no byte and draws no random numbers from crypto: it
// also runs at boot (see warmUp). OUTPUT_CODE writes, after a restore only (see rewarm).
const WARMUP_CODE = `import path from 'node:path';
const xs = [3, 1, 2].map((x) => x * 2).sort();
const o = { xs, s: \`\${path.basename('/a/b.js')} \${xs.length}\`, n: 1.5, t: true, z: null };
JSON.stringify(o);
o`;
// Hashing only (replay.mjs): no OpenSSL generator is touched (docs/snapshot.md).
const WARMUP_SEED = `${'A'.repeat(43)}=`;
const WARMUP_TOOLS = [{ provider: 'warm', name: 'up' }];
// The same for TypeScript (typescript.mjs): the common type syntax, so that the parts of the
// stripper (WebAssembly) that most code goes through are compiled and translated too.
const WARMUP_TS_CODE = `import path from 'node:path';
interface Point<T = number> { x: T; y?: T; readonly tag: string }
type Pair = [a: string, b: number] | null;
function pick<K extends keyof Point>(p: Point, k: K): Point[K] { return p[k]!; }
const p: Point = { x: 1, tag: path.basename('/a/b.ts') } satisfies Point;
const xs = [3, 1, 2].map((x: number): number => x * 2).sort() as number[];
let pair: Pair = null;
({ xs, x: pick(p, 'x'), pair, s: \`\${p.tag} \${xs.length}\` } as const)`;
const OUTPUT_CODE = `console.log('%s %d', 'warm', 1, { a: [1] });
console.log(1);
console.error('warm');
1`;

// An execution from its code to its encoded done, through execute(), except that the done is
// dropped and the runner goes on waiting. The message goes through JSON.parse as the agent's
// would (its usual members in its order: V8 builds objects of those shapes once for all).
async function rehearse(code, tools, language = 'javascript') {
    const msg = JSON.parse(JSON.stringify({ type: 'execute', id: 'warmup',
        language, code, tools, output_limit: 1, timeout_ms: 1, seed: WARMUP_SEED }));
    await new Promise((resolve) => execute(msg, resolve));
    current = null;
}

// At start-up, before the first pong. It must not write a byte (the agent discards what a
// waiting runner wrote, but a cold boot may hand the execute over before this is done).
async function warmUp() {
    await rehearse(WARMUP_CODE, WARMUP_TOOLS);
    describe(new TypeError('warm-up'));
    // console.log's formatting, into nowhere.
    const sink = new Writable({ write(chunk, encoding, callback) { callback(); } });
    new console.Console(sink, sink).log('%s %d', 'warm', 1, { a: [1] });
}

// TypeScript's part of the warm-up, at the first ping only: a pre-started runner (the one in
// the snapshot) serves either language, but loading the stripper costs seconds under TCG, which
// a runner spawned for a JavaScript execute should not pay (it loads it if its code is
// TypeScript). A refused construct is rehearsed too: its error path is the stripper's as well.
async function warmUpTypeScript() {
    if (!loadTypeScript())
        return; // an older node (the hosts' tests): JavaScript only
    await rehearse(WARMUP_TS_CODE, WARMUP_TOOLS, 'typescript');
    try {
        stripTypes('enum E { A }', FILENAMES.typescript);
    } catch (e) {
        describe(e);
    }
}

// At the second ping, which comes when the host's hello asks for a warm-up: a pooled VM
// restored from a snapshot, whose emulator (TCG) lost its translated code. The real output
// paths too: the global console and the process streams into the pipes of the execution to
// come, whose first write otherwise pays for translating node's, the kernel's and the agent's
// output paths. The agent reads these bytes and drops them when our pong comes (it answers
// the hello, so no execute comes before).
// TypeScript gets its stripper run (WebAssembly, which TCG must translate again), not a whole
// rehearsal: the rest of a TypeScript execution is the JavaScript path rehearsed here.
async function rewarm() {
    await rehearse(WARMUP_CODE, WARMUP_TOOLS);
    if (loadTypeScript())
        stripTypes(WARMUP_TS_CODE, FILENAMES.typescript);
    await rehearse(OUTPUT_CODE, []);
    process.stdout.write('warm\n');
}

// Answer pings until the execute comes, with blocking reads (see channel.mjs), and start it
// right there (not through a promise: one more hop of code not run since the restore). The
// first ping asks whether we are warm: we are once TypeScript's part is done too (the channel
// is read only after the rest of the warm-up), and only a pre-started runner gets that ping.
async function serve() {
    for (let pings = 0; ;) {
        const msg = readFrameSync(CHANNEL_FD);
        if (msg === null)
            process.exit(70); // the agent is gone: nobody is left to report to
        if (msg.type === 'execute') {
            execute(msg, deliver);
            return;
        }
        if (msg.type === 'ping') {
            if (pings++ > 0)
                await rewarm();
            else
                await warmUpTypeScript();
            writeFrameSync(CHANNEL_FD, encode({ type: 'pong', seq: msg.seq }));
        }
    }
}

// The done goes out over the Channel if a tool call opened one, else with a blocking write.
// Then the runner waits, blocked, for the agent to close the channel: the agent kills it as
// soon as it has read the done. Exiting by itself would run node's teardown (tens of ms of
// code never translated under TCG) on the only vCPU, while the agent has the done to report.
// In parentheses: V8 compiles it with this module, not at its first call (the real execute's
// end), where compiling costs milliseconds of TCG; the same for waitForCloseSync.
const deliver = (async function deliver(frame, code) {
    exitCode = code;
    if (current.keep)
        return keepAfter(frame);
    if (channel) {
        await channel.send(frame);
        channel.ref(true); // stay until the close (openChannel)
        return;
    }
    writeFrameSync(CHANNEL_FD, frame);
    waitForCloseSync(CHANNEL_FD);
    process.exit(code);
});

// A session's execute is over: its done goes out over the Channel, and the runner stays, its
// event loop running (timers of the code go on), until the agent hands it the next execute
// (openChannel) or kills it.
async function keepAfter(frame) {
    abandonCalls();
    if (!channel)
        openChannel();
    channel.ref(true);
    await channel.send(frame);
}

// Start the execution of @msg; its done goes to @handOver(frame, exitCode).
function execute(msg, handOver) {
    current = { id: msg.id, finished: false, deliver: handOver, keep: msg.keep === true };
    replay.begin(msg, handOver !== deliver);
    run(msg).then(succeed, fail);
}

// Not a top-level await: this module's evaluation ends here, at start-up, and not at the
// execute (where finishing it would run V8's module code for the first time: ~1 ms of TCG).
async function main() {
    replay.install();
    replay.setSink(sendLog);
    // What the program read goes out before anything it shows (replay.mjs).
    for (const stream of [process.stdout, process.stderr]) {
        const write = stream.write;
        stream.write = function (...args) {
            replay.flush();
            return write.apply(this, args);
        };
    }
    await warmUp();
    await serve();
}

main().catch(() => process.exit(70)); // a broken channel or runner: the agent sees us gone
