/*
 * Limits and constants of the guest <-> host protocol (docs/protocol.md).
 *
 * Shared by the host agent and the guest agent. Each number bounds something a hostile peer
 * could otherwise grow; the comment says why that number.
 */
#pragma once

#define SBX_PROTOCOL_VERSION 1

/* vsock port the guest agent listens on. Above 1023 so it is not a "privileged" vsock port. */
#define SBX_AGENT_PORT 1024

/*
 * Largest frame payload in either direction. The largest legitimate message is `execute`
 * carrying the user's source code; 4 MiB of source is far beyond any script people send to a
 * sandbox, and an output chunk (64 KiB, base64-encoded) is much smaller. The length is checked
 * before anything is allocated, so a peer claiming 4 GiB costs nothing.
 */
#define SBX_FRAME_MAX (4u * 1024 * 1024)

/* Frame header: a 4-byte big-endian payload length. */
#define SBX_FRAME_HEADER 4

/*
 * JSON nesting depth. cJSON is built with CJSON_NESTING_LIMIT set to this (see
 * host-agent/protocol/meson.build) because it parses recursively. Messages nest 3-4 levels;
 * tool inputs and results a handful more. 32 leaves room without risking either agent's stack.
 */
#define SBX_JSON_DEPTH_MAX 32

/*
 * Decoded bytes in one `output` frame. Big enough that streaming 1 GiB is not dominated by
 * per-frame cost, small enough that a frame (base64 adds a third) stays far below
 * SBX_FRAME_MAX and output appears live.
 */
#define SBX_OUTPUT_CHUNK_MAX (64 * 1024)

/* Execution ids: short printable tokens chosen by the host ([A-Za-z0-9_.-]). */
#define SBX_ID_MAX 64

/* Provider and tool identifiers, error type names, capability names. */
#define SBX_NAME_MAX 128

/* Session token chosen by the host, echoed by the guest. */
#define SBX_TOKEN_MAX 128

/* Fresh entropy the host gives every guest (bytes); 64 bytes = 512 bits, enough to reseed. */
#define SBX_ENTROPY_MIN 32
#define SBX_ENTROPY_MAX 256

/*
 * The per-execution seed of the runners' random generators (execute.seed, docs/protocol.md
 * "Replay"): 32 bytes = 256 bits, the key size of the SHA-256 based generator it seeds, so a
 * program that does not know it cannot predict what it draws. Exactly this many: one length
 * means one spelling, so a record's seed is replayed as it was.
 */
#define SBX_SEED_BYTES 32

/*
 * Clock reads in one execution's log (done.clock_log, execute.clock_log). A program reads the
 * time a few times, a busy loop timing itself a few thousand; 100000 covers both and keeps the
 * log under 1.7 MB of JSON (at most 16 digits and a comma per read), so it fits a frame beside
 * a large result or program. Past it the runner stops logging and the execution is not
 * replayable ("too many clock reads").
 */
#define SBX_CLOCK_READS_MAX 100000

/*
 * Asynchronous deliveries in one execution's event log (replay_log.events, execute.event_log):
 * each timer callback fired and each tool result delivered, in order. 131072 = twice
 * SBX_SESSION_CALLS_MAX (65536 tool calls in one execution), so the results of the most calls
 * allowed fit with as many timer firings; the runners' encodings are small integers (about 7
 * digits), so a full log is ~1 MB of JSON and a replay's execute with a full clock log (~1.7 MB)
 * beside it still fits a frame. Past it the execution is not replayable ("too many events").
 */
#define SBX_EVENT_LOG_MAX 131072

/*
 * Entries of one replay_log message (clock and events each): the runners flush at 4096; the
 * cap keeps one frame's decoding small (~70 KB of JSON at most per array).
 */
#define SBX_REPLAY_LOG_BATCH_MAX 4096

/* Why an execution is not replayable (done.not_replayable): a sentence; longer is cut. */
#define SBX_REASON_MAX 1024

/*
 * Longest wait for the guest's pre-started runners a hello may ask for (hello.warm_wait_ms):
 * 10 minutes, far beyond any warm-up (the snapshot maker asks for ~2 min), so that a mistaken
 * value cannot park an agent for days.
 */
#define SBX_WARM_WAIT_MAX_MS (10 * 60 * 1000)

/* Tools in one namespace. A catalog with more than this is a configuration mistake. */
#define SBX_TOOLS_MAX 1024

/*
 * Default cap on tool calls in flight per execution. Each pending call holds host resources
 * (a thread or a provider connection); a guest looping `tools.x()` without awaiting must not
 * exhaust them. The host may configure a lower cap; the guest agent refuses above this one.
 */
#define SBX_TOOL_CALLS_IN_FLIGHT_MAX 64

/* Error message and stack strings in `done` and `tool_result` are cut to this many bytes. */
#define SBX_ERROR_TEXT_MAX (16 * 1024)

/*
 * JSON values (of any kind) in one message. cJSON allocates about 100 bytes per value (the node,
 * and the name of an object member), so a 4 MiB frame of "[0,0,0,..." would cost ~200 MiB to
 * parse without this cap; with it a frame costs at most ~30 MiB while it is parsed. Real
 * payloads average well above 16 bytes per value, so a full-size frame of real JSON fits.
 */
#define SBX_JSON_VALUES_MAX (256 * 1024)

/*
 * Largest value of the 64-bit integer fields (time_us, duration_ms, output_limit): 2^53 - 1,
 * the largest integer a double - and so cJSON and JavaScript - holds exactly. In microseconds
 * since the Unix epoch that lasts until the year 2255.
 */
#define SBX_JSON_INT_MAX 9007199254740991ull

/*
 * Digits of a number literal's exponent, leading zeros aside. Values are compared exactly as
 * decimals whose exponent is a 64-bit integer (host-agent/protocol/json.h), and 18 digits leave
 * room in it for the shift by the literal's own length. No runtime holds such a number anyway:
 * a double ends near 1e308, Python's decimal module defaults to exponents below 1e6.
 */
#define SBX_JSON_EXPONENT_DIGITS 18

/* Languages one hello_ok may announce; an agent offering more is confused or hostile. */
#define SBX_LANGUAGES_MAX 16

/*
 * Files (docs/protocol.md, "Files"). A chunk travels raw in a data frame after its message. 1 MiB
 * is large enough that a message and a write per chunk cost little against moving its bytes,
 * and small enough that the few chunks a transfer keeps in flight (SBX_SESSION_FILE_WINDOW) are
 * cheap to hold on either side.
 */
#define SBX_FILE_CHUNK_MAX (1024 * 1024)

/*
 * Largest data frame (docs/protocol.md, "Data frames"): a file's chunk, the only thing they
 * carry. The header's bit 31 marks them, so a reader not armed for one sees a length above
 * 2 GiB, far above any frame limit, and refuses it as before.
 */
#define SBX_DATA_FRAME_MAX SBX_FILE_CHUNK_MAX

/*
 * A workspace path: 1024 bytes (a file name 255, Linux's NAME_MAX). One list answer holds at
 * most 1024 entries: with every path at its longest and every byte escaped twice as long in
 * JSON, that is under 2.5 MiB, inside a frame.
 */
#define SBX_PATH_MAX 1024
#define SBX_PATH_NAME_MAX 255
#define SBX_FILE_LIST_MAX 1024
