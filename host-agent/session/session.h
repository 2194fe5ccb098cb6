/*
 * The execution driver: the host's end of the guest protocol over a connected stream socket to
 * the guest agent (sbx_vm_take_channel()). It runs on the GLib main loop of the thread that
 * created it: it sends hello, checks hello_ok, sends execute, and then relays output, tool calls
 * and the final done to its owner through callbacks.
 *
 * Everything the guest sends is untrusted. A frame that does not decode, a message that is not
 * expected in the current state (hello_ok twice, output before started, output for another
 * execution, a reused call id, ...) ends the execution with status `crash` and an
 * internal_error "protocol violation: ..."; the owner must then kill the VM. The host enforces
 * its own limits and never takes the guest's word for them: the wall-clock timeout (status
 * `timeout`), the output cap (excess dropped, output_truncated set), the number of tool calls in
 * flight, one answer per call id. Host memory stays bounded whatever the guest sends.
 *
 * Between executions the workspace's files can be put, got, listed and deleted (files.h); a
 * file operation in progress keeps the session from being ready.
 *
 * Callbacks must not free the session; free it later (e.g. from an idle callback).
 */
#pragma once

#include <gio/gio.h>

#include "protocol/message.h"

typedef struct SbxSession SbxSession;

/*
 * Default host-side output cap for one execution (stdout + stderr): what the CLI collects for
 * --json must stay modest, and 10 MiB is far beyond what a person reads from one run.
 */
#define SBX_SESSION_OUTPUT_LIMIT_DEFAULT (10u * 1024 * 1024)

/* Default wall-clock timeout of an execution, from `execute` sent to `done` received. */
#define SBX_SESSION_TIMEOUT_DEFAULT_MS 30000

/*
 * Time the guest agent has to answer hello. The VM layer hands over the channel only once the
 * agent accepted the connection, and hello_ok costs it microseconds; 10 s absorbs a loaded host
 * under TCG without letting a dead agent hang a request.
 */
#define SBX_SESSION_HELLO_TIMEOUT_MS 10000

/* Fresh entropy sent in hello: 512 bits, enough to reseed the guest's kernel and runtimes. */
#define SBX_SESSION_ENTROPY_BYTES 64

/*
 * Bytes of encoded frames waiting to be written to the guest. The largest frame we send is one
 * `execute` (<= SBX_FRAME_MAX); tool results (<= 1 MiB each) and pongs come on top. A guest
 * that lets more than 16 MiB pile up is not reading its channel: that is a protocol violation,
 * and it keeps a hostile guest from growing host memory through us.
 */
#define SBX_SESSION_WRITE_QUEUE_MAX (16u * 1024 * 1024)

/*
 * The record of an execution's tool calls (the basis of replay) is bounded: at most this many
 * calls and this many bytes of inputs, results and messages. Calls beyond are counted, not
 * stored (SbxRunResult.tool_calls_dropped).
 */
#define SBX_SESSION_RECORD_CALLS_MAX 1024
#define SBX_SESSION_RECORD_BYTES_MAX (16u * 1024 * 1024)

/*
 * Tool calls in one execution. Call ids must stay unique, so the host remembers every id it
 * has seen; this bounds that set (~2 MiB). Each call costs a frame round trip, so a program
 * that makes more is looping: the execution ends with a tool_error.
 */
#define SBX_SESSION_CALLS_MAX 65536

/* One tool call of the execution, as recorded by the host. */
typedef struct {
    guint32 call_id;
    char *provider;    /* identifier the guest used */
    char *tool;        /* identifier the guest used */
    char *input_json;  /* compact JSON */
    gboolean answered; /* FALSE if the execution ended first */
    gboolean ok;
    char *result_json;       /* when ok (NULL if result_dropped) */
    gboolean result_dropped; /* the result did not fit the record's bound */
    SbxError error;          /* when answered and !ok */
    guint64 duration_ms;     /* tool_call received to tool_result queued */
    char *policy_json;       /* how the tool policy decided (JSON object), or NULL */
} SbxToolRecord;

/* What the host knows once an execution has ended. Owned by the session. */
typedef struct {
    SbxStatus status;
    int exit_code;     /* the guest's; -1 if none (no done, or killed by a signal) */
    char *result_json; /* the program's value (compact JSON), or NULL */
    gboolean has_error;
    SbxError error;
    gboolean output_truncated;   /* the host dropped output, or the guest said it did */
    guint64 output_bytes;        /* output bytes accepted (<= the cap) */
    guint64 duration_ms;         /* host-measured: execute sent to the end */
    gboolean protocol_violation; /* the guest broke the protocol */
    gboolean channel_lost;       /* the channel ended under it: maybe the VM died (its caller
                                    may know why: sbx_session_amend_error()) */
    gboolean vm_reusable;        /* only after a proper done: else the guest may still run */
    gboolean kept; /* a keep run's done said its runner (and its state) is still there */
    /* What a replay needs, as the guest reported it in its done (docs/protocol.md, "Replay";
     * untrusted: checked for shape and bounds only). clock_log: the program's clock reads in
     * order, from its replay_log messages and its done (NULL: none reported); replayable FALSE
     * with a reason, or without one when the guest said nothing (not_replayable NULL). */
    guint64 *clock_log;
    gsize n_clock_log; /* at most SBX_CLOCK_READS_MAX */
    /* The order of the asynchronous deliveries (timers fired, tool results delivered:
     * runner-defined integers), from the guest's replay_log messages; NULL: none came. */
    guint64 *event_log;
    gsize n_event_log; /* at most SBX_EVENT_LOG_MAX */
    /* The run was killed (timeout, memory_limit, crash, cancelled, terminated) without the
     * runner's done: its logs are those streamed before the kill, and a replay waits past
     * their ends instead of diverging (docs/protocol.md, "Replay"). */
    gboolean log_open;
    gboolean replayable;
    char *not_replayable;
    GByteArray *collected[SBX_STREAM__COUNT]; /* when collect_output; else NULL */
    GPtrArray *tool_calls;                    /* SbxToolRecord*, in arrival order */
    guint tool_calls_dropped;                 /* calls not recorded (record full) */
} SbxRunResult;

typedef struct {
    /* Output accepted (within the cap). Optional. */
    void (*on_output)(SbxSession *session, SbxStream stream, const guint8 *data, gsize len,
                      gpointer user_data);
    /*
     * A tool call to run. The owner answers with sbx_session_tool_result() exactly once,
     * possibly later from the main loop. Strings are valid during the callback only.
     * Required if the execution declares tools.
     */
    void (*on_tool_call)(SbxSession *session, guint32 call_id, const char *provider,
                         const char *tool, const char *input_json, gpointer user_data);
    /* The execution ended (exactly once per sbx_session_run()). @result is owned by the session. */
    void (*on_done)(SbxSession *session, const SbxRunResult *result, gpointer user_data);
    /*
     * Between executions the guest broke the channel (EOF, a frame after done, ...): the VM
     * must not be reused. Optional.
     */
    void (*on_broken)(SbxSession *session, const char *reason, gpointer user_data);
} SbxSessionCallbacks;

typedef struct {
    const char *id; /* the execution id (sbx_session_new_execution_id()); NULL: a new one */
    SbxLanguage language;
    const char *code;
    const char *entry;       /* optional */
    const char *args_json;   /* optional JSON array */
    const char *kwargs_json; /* optional JSON object (Python's keyword arguments) */
    gboolean keep; /* a session's run: the guest keeps the runner and its state after done */
    const SbxToolDecl *tools;
    gsize n_tools;
    guint64 output_limit; /* bytes, stdout + stderr; 0 = SBX_SESSION_OUTPUT_LIMIT_DEFAULT */
    guint timeout_ms;     /* 0 = SBX_SESSION_TIMEOUT_DEFAULT_MS */
    guint tool_calls_max; /* in flight; 0 or above the protocol's cap = SBX_TOOL_CALLS_IN_FLIGHT_MAX
                           */
    gboolean collect_output; /* keep output (up to the cap) in SbxRunResult.collected */
    /* The runners' seed, SBX_SEED_BYTES (a replay's: the record's), or NULL: a fresh one. */
    const guint8 *seed;
    /* No seed at all (SANDBOX_REPLAY=off, exec.h): the runners draw from the kernel and log
     * nothing for a replay; the record says it is not replayable. */
    gboolean no_seed;
    /* A replay's clock reads (SbxRunResult.clock_log of the record), or NULL: not a replay. */
    const guint64 *clock_log;
    gsize n_clock_log;
    /* A replay's order of deliveries (SbxRunResult.event_log of the record), or NULL. */
    const guint64 *event_log;
    gsize n_event_log;
    gboolean log_open; /* the record's log_open: past the logs' ends the replay waits */
} SbxRunRequest;

/*
 * A ping to the guest agent must be answered within this. The agent answers from its main
 * loop at once; 2 s absorbs a loaded host under TCG, and a pooled VM that takes longer is no
 * VM to hand a request.
 */
#define SBX_SESSION_PING_TIMEOUT_MS 2000

/**
 * Outcome of sbx_session_handshake_async() or sbx_session_ping_async(): @error NULL = done.
 * On an error the session is closed (the VM must not be used). Must not free the session.
 */
typedef void (*SbxSessionReadyFunc)(SbxSession *session, const GError *error, gpointer user_data);

/**
 * Wrap the connected socket @fd (ownership passes to the session, also on failure).
 * Nothing is sent until sbx_session_run() or sbx_session_handshake_async(). @callbacks'
 * on_done may be NULL until the first run (sbx_session_set_callbacks()).
 */
SbxSession *sbx_session_new(int fd, const SbxSessionCallbacks *callbacks, gpointer user_data,
                            GError **error);

/**
 * Do the hello now, ahead of any execution (a pooled VM: the claim then costs no round trip).
 * @warm_up asks the agent to have its runners warm up again first (after a restore: TCG has
 * no translated code). @func runs once, from the main loop. Afterwards sbx_session_run() sends
 * the execute at once, with the host's clock and fresh entropy again (the hello may be old).
 * Returns FALSE (and @func never runs) if the session is not new or hello cannot be sent.
 */
gboolean sbx_session_handshake_async(SbxSession *session, gboolean warm_up,
                                     SbxSessionReadyFunc func, gpointer user_data, GError **error);

/**
 * Ping the agent of a handshaken, idle session: @func runs once, when the pong comes
 * (@error NULL) or when it does not within SBX_SESSION_PING_TIMEOUT_MS or the channel breaks.
 * Returns FALSE when not idle or a ping is outstanding (@func never runs then).
 */
gboolean sbx_session_ping_async(SbxSession *session, SbxSessionReadyFunc func, gpointer user_data);

/** Withdraw the outstanding ping's function (its pong is still accepted). No-op if none. */
void sbx_session_ping_cancel(SbxSession *session);

/** Handshaken, idle, not broken, no file operation: an execution can be sent at once. */
gboolean sbx_session_is_ready(const SbxSession *session);

/** Monotonic time (us) hello_ok came, or 0. */
gint64 sbx_session_hello_time(const SbxSession *session);

/** Hand the session to a new owner (e.g. a claimed pooled VM): its callbacks and data. */
void sbx_session_set_callbacks(SbxSession *session, const SbxSessionCallbacks *callbacks,
                               gpointer user_data);

/** Close the channel and free everything. No callback runs afterwards. Accepts NULL. */
void sbx_session_free(SbxSession *session);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxSession, sbx_session_free)

/**
 * Start an execution: hello (unless done before: a previous run or the handshake), then
 * execute once hello_ok checked out. on_done must be set.
 * Returns FALSE if the request cannot be sent at all (too large, bad arguments, the session is
 * busy or broken); otherwise on_done will be called exactly once.
 */
gboolean sbx_session_run(SbxSession *session, const SbxRunRequest *request, GError **error);

/**
 * Answer tool call @call_id: with @result_json (compact JSON) when @error is NULL, otherwise
 * with @error. Returns FALSE (and sends nothing) if the call is not in flight: already answered,
 * never made, or its execution has ended (a late answer after a timeout is normal).
 */
gboolean sbx_session_tool_result(SbxSession *session, guint32 call_id, const char *result_json,
                                 const SbxError *error);

/**
 * Note in the record of call @call_id (in flight) how the tool policy decided it: a compact JSON
 * object of at most SBX_SESSION_POLICY_NOTE_MAX bytes, built by the host (longer: not kept).
 * Call before sbx_session_tool_result(). FALSE if the call is not in flight.
 */
gboolean sbx_session_tool_policy(SbxSession *session, guint32 call_id, const char *policy_json);

/* A policy note is a few fields (action, rule, approval outcome): 1 KiB is ample. */
#define SBX_SESSION_POLICY_NOTE_MAX 1024

/**
 * End the running execution now with @status (timeout, cancelled, terminated, crash) and
 * @message; tells the guest with `cancel` if it can. Used when the host stops an execution,
 * e.g. because the VM died (@status crash). No-op when nothing runs.
 */
void sbx_session_abort(SbxSession *session, SbxStatus status, SbxErrorCode code,
                       const char *message);

/**
 * The last execution ended with an error (e.g. its channel lost) whose cause its caller learnt
 * afterwards (the VM's exit): its error message becomes @message. No-op without an error.
 */
void sbx_session_amend_error(SbxSession *session, const char *message);

/** The execution id of the current (or last) execution, or NULL before the first. */
const char *sbx_session_execution_id(const SbxSession *session);

/* Room for an execution id ("x" + 16 hex digits, NUL), as sbx_session_run() makes them. */
#define SBX_SESSION_EXECUTION_ID_SIZE 18

/** A new execution id into @out, as sbx_session_run() makes one ("x" + 16 hex digits). */
gboolean sbx_session_new_execution_id(char out[SBX_SESSION_EXECUTION_ID_SIZE], GError **error);

/*
 * What the guest was given for its current (or last) execution, as the record keeps it for a
 * replay: the entropy and the wall clock of the hello, or of the execute when that carried them
 * again (after a handshake ahead, a pooled VM), and the execute's seed. Secret-ish: never
 * logged.
 */
typedef struct {
    guint8 entropy[SBX_SESSION_ENTROPY_BYTES];
    gsize entropy_len;           /* 0: nothing was sent yet */
    gint64 time_us;              /* the wall clock sent (unix us) */
    guint8 seed[SBX_SEED_BYTES]; /* the execute's seed of the runners' generators */
    gboolean has_seed;           /* FALSE: no execute was sent yet */
} SbxSessionGiven;

/** Fill @out with what the guest was given (above). FALSE if nothing was sent yet. */
gboolean sbx_session_given(const SbxSession *session, SbxSessionGiven *out);

/** Free a record (for owners that copy records). */
void sbx_tool_record_free(SbxToolRecord *record);

/** Release what @error owns and zero it. */
void sbx_error_clear(SbxError *error);

/** Deep-copy @src into @dst (message and stack cut to SBX_ERROR_TEXT_MAX). */
void sbx_error_copy(SbxError *dst, const SbxError *src);
