/*
 * The guest agent: one host connection, at most one execution, one poll() loop.
 *
 * Module map (one job per file):
 *   main.c    options, start-up          loop.c    the poll() loop, timers, back-pressure
 *   listen.c  vsock / unix listener      conn.c    host connection state, framed I/O
 *   host.c    messages from the host     exec.c    an execution's lifecycle
 *   spawn.c   starting a runner process  runner.c  the runner channel (fd 3 of the runner)
 *   output.c  stdout/stderr -> output    done.c    the final `done` report
 *   calls.c   tool call ids              pid1.c    signals, reaping, power-off
 *   entropy.c kernel RNG and clock       link.c    framed non-blocking endpoint
 *   prestart.c runners started ahead of their execute (one per language, used once)
 *   kept.c    a session's runners, kept between its executes (execute.keep)
 *   files.c   the workspace and its file operations (file -> file_result)
 *   seccomp.c the syscall filter of every runner (io_uring refused)
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "calls.h"
#include "link.h"
#include "protocol/message.h"

#define AGENT_NAME "sandbox-agent 0.1.0"

/*
 * Output is read from the runner's pipes only while less than this waits for the host. A slow
 * host then stalls the program's writes (its pipe fills up) instead of growing our memory;
 * 1 MiB is about a dozen output frames in flight, enough to keep the stream busy. Producers
 * (pipes, the runner channel, the host's pings) are only polled below this mark and each adds
 * a bounded amount per round, so the queue stays below it plus a few frames.
 */
#define HOST_QUEUE_SOFT_MAX (1024 * 1024)

/*
 * Tool results waiting for the runner to read them. A runner that stops reading its channel
 * (user code blocking the event loop) makes us stop reading the host above this mark; the host
 * then sees back-pressure and its own timeout ends the execution. 16 MiB holds four results of
 * the largest size at once, far more than a runner that reads ever leaves behind.
 */
#define RUNNER_QUEUE_MAX (16 * 1024 * 1024)

/*
 * Messages handled from one peer per loop round: a peer that sends as fast as we parse must
 * not starve the other file descriptors.
 */
#define MESSAGES_PER_ROUND 64

/* Default cap on stdout+stderr bytes when execute.output_limit is 0 (docs/protocol.md). */
#define OUTPUT_LIMIT_DEFAULT (16ull * 1024 * 1024)

/*
 * hello_ok waits at most this long for the pre-started runners to be warm (in a restored VM they
 * are: no wait), unless the hello says how long (warm_wait_ms: the snapshot maker asks for as
 * long as it takes, since a snapshot must hold warm runners). It stays well below the host's own
 * hello timeout (SBX_SESSION_HELLO_TIMEOUT_MS, 10 s): a cold boot under TCG on a quiet machine
 * has node warm a few seconds after the agent starts (its TypeScript stripper included).
 */
#define PRESTART_HELLO_WAIT_MS 7000

/*
 * The wall clock the guest reads from boot until the first hello sets it (PID 1 only):
 * 2000-01-01T00:00:00Z. A pre-started node seeds OpenSSL's DRBGs at its start, and a snapshot
 * clones them; OpenSSL 3 reseeds a DRBG from the kernel when the clock has moved more than
 * 7 minutes (1 hour for the primary) since its last seeding, or backwards. Starting the runners
 * at a clock decades behind the one every hello sets makes each clone's first crypto call
 * reseed from its own (freshly reseeded) kernel generator. See docs/snapshot.md.
 */
#define PRESTART_CLOCK_US (946684800ll * 1000000)

/* The host must send hello this soon after connecting, or the connection is closed. */
#define HELLO_TIMEOUT_MS 5000

/* After a protocol error, how long the error frame may take to leave before we close. */
#define CLOSING_TIMEOUT_MS 1000

/*
 * After the runner reported `done`, how long it may take to exit before its process group is
 * killed (it only has to flush and exit; user code that fakes `done` and goes on does not get
 * to run on).
 */
#define EXIT_GRACE_MS 2000

/*
 * After the runner exited and its group was killed, how long the pipes may stay open without
 * a byte before we stop waiting for EOF (a process that left the group still holds them).
 */
#define DRAIN_GRACE_MS 2000

/*
 * Reads per pipe when the runner's done is reported before its exit: what the runner wrote
 * before its done is in the pipe (at most its buffer: 64 KiB, 1 MiB if the code enlarged it,
 * i.e. 16 reads of 64 KiB); more comes only from a process still running, killed right after.
 */
#define EARLY_DRAIN_READS 16

/*
 * Directory levels a file operation walks below its path (list, delete). Each level holds a
 * directory stream (~32 KiB) and a file descriptor while the walk is below it: 64 levels bound
 * that to 2 MiB and 64 descriptors. A list stops there (truncated); a delete moves a deeper
 * directory up and goes on (files.c).
 */
#define FILES_DEPTH_MAX 64

typedef struct AgentOptions {
    unsigned vsock_port;     /* --listen-vsock */
    const char *unix_path;   /* --listen-unix: used instead of vsock when set */
    const char *runners_dir; /* --runners */
    const char *node;        /* --node */
    const char *python;      /* --python */
    long run_as;             /* --run-as: uid (and gid) of user code, -1 to keep ours */
    bool prestart;           /* not --no-prestart: start one runner per language ahead */
    const char *workspace;   /* --workspace: the runners' working directory, the files' root */
} AgentOptions;

typedef enum {
    CONN_NONE,     /* no host connected */
    CONN_HELLO,    /* connected, waiting for hello */
    CONN_GREETING, /* hello handled; hello_ok waits for the pre-started runners (bounded) */
    CONN_READY,    /* hello answered */
    CONN_CLOSING,  /* an error frame is leaving; nothing more is read */
} ConnState;

typedef struct Exec {
    char *id;
    pid_t pid;   /* the runner, leader of its own process group; 0 once reaped */
    int wstatus; /* from waitpid, once reaped */
    Link chan;   /* the runner channel (socketpair; fd 3 in the runner) */
    bool chan_open;
    bool chan_mute; /* the runner's end cannot take more (it exited): read it, write nothing */
    int pipes[SBX_STREAM__COUNT]; /* read ends of stdout, stderr; -1 at EOF */
    uint64_t out_limit, out_used;
    bool truncated;
    int64_t start_ms;
    int64_t oom_kills_at_start; /* the kernel's count when it started (-1: unknown) */
    int64_t kill_deadline_ms;   /* EXIT_GRACE_MS after the runner's done; 0: none */
    int64_t drain_deadline_ms;  /* DRAIN_GRACE_MS after exit or the last byte; 0: none */
    bool cancelled;
    SbxLanguage lang; /* the runner's language (JavaScript for TypeScript) */
    bool keep;        /* a session's execute: keep the runner after its done (kept.c) */
    bool kept;        /* ... and it was: the done says so */
    bool early;       /* done sent on the runner's done, before its exit (exec.c, finish_early) */
    bool have_done;
    SbxDone done; /* the runner's own report (status, result, error) */
    bool failed;
    SbxError failure; /* what the agent saw go wrong (runner protocol violation, ...) */
    Calls calls;
} Exec;

/*
 * A runner started ahead of its execute (prestart.c); pid 0: none (not started, used, dead).
 * Indexed by the runner's language (spawn_runner_language): TypeScript's slot stays unused,
 * its executes go to the JavaScript runner.
 */
typedef struct Prestart {
    const char *name; /* the language's name, for the log */
    pid_t pid;        /* leader of its own process group */
    Link chan;        /* we sent it a ping; its pong says it is warm */
    bool chan_open;
    bool ready;                   /* it answered the ping */
    bool rewarmed;                /* asked to warm up again (prestart_rewarm), once */
    bool rewarming;               /* ... and its pong (warm again) has not come yet */
    int pipes[SBX_STREAM__COUNT]; /* read ends of stdout, stderr (not read while it waits) */
} Prestart;

/*
 * A session's runner, kept after the done of a keep execute for the next execute of its
 * language (kept.c); pid 0: none. Indexed like Prestart.
 */
typedef struct Kept {
    pid_t pid; /* leader of its own process group */
    Link chan; /* quiet between executes: anything it sends there ends it */
    bool chan_open;
    int pipes[SBX_STREAM__COUNT]; /* read and dropped between executes */
    bool lost; /* it died between executes: the next keep execute is told (RunnerLost) */
} Kept;

/* A write in progress (files.c): chunks go into a temporary file beside the target. */
typedef struct Upload {
    char *path;   /* the target's workspace path; NULL: no write in progress */
    char *name;   /* its last component (points into path) */
    int dir_fd;   /* the directory it goes into */
    int fd;       /* the temporary file there */
    char tmp[32]; /* its name */
    uint64_t written;
} Upload;

typedef struct Agent {
    AgentOptions opt;
    bool pid1; /* we are init: reap everything, never exit */
    int listen_fd;
    int signal_fd;
    ConnState conn_state;
    bool conn_broken;         /* the socket failed: close at the end of the loop round */
    Link host;                /* the host connection, unless CONN_NONE */
    int64_t conn_deadline_ms; /* hello or closing deadline; 0: none */
    char *greeting_token;     /* CONN_GREETING: the hello's token, for hello_ok */
    int64_t greeting_time_us; /* CONN_GREETING: the hello's clock ... */
    int64_t greeting_ms;      /* ... and when it arrived (monotonic) */
    int64_t greeting_wait_ms; /* ... and how long hello_ok may wait for the runners */
    Exec *exec;               /* the running execution, or NULL */
    pid_t early_pid;          /* runner of an execution done before its exit; 0 once reaped */
    Prestart pre[SBX_LANG__COUNT];
    Kept kept[SBX_LANG__COUNT];
    int workspace_fd; /* O_PATH of the workspace; -1: it could not be opened */
    Upload upload;
    bool conn_serial;         /* the host connection is on the virtio-serial port (serial.c) */
    int serial_fd;            /* the port while no connection uses it; -1: in use or none */
    bool serial_draining;     /* an ended connection's host is still attached: drop its bytes */
    char serial_dev[64];      /* the port's device node; "" when the VM has none */
    int64_t serial_retry_ms;  /* reopen the port then (a reopen failed); 0: none due */
    int serial_retry_wait_ms; /* the wait before that retry (doubles) */
    bool quit;                /* SIGTERM/SIGINT when not PID 1 */
} Agent;

/* listen.c */
/** Create the listening socket of @o (vsock or unix). Returns the fd or -errno. */
int listen_open(const AgentOptions *o);

/* conn.c */
/** Accept a connection on the listener; refuse it (error frame) while one is active. */
void conn_accept(Agent *a);
/** Make the non-blocking stream @fd the host connection (@serial: the virtio-serial port). */
void conn_attach(Agent *a, int fd, bool serial);
/** Handle poll events on the host connection. */
void conn_on_events(Agent *a, short revents);
/**
 * Queue @msg to the host and try to write at once. Returns 0; -EMSGSIZE or -EINVAL if @msg
 * cannot be encoded (nothing sent, the connection goes on); other errors mark the connection
 * broken.
 */
int conn_send(Agent *a, const SbxMsg *msg);
/**
 * conn_send() of @msg, which announces a data frame, followed by it: @data (malloc'd, taken in
 * every case, queued without a copy; NULL: none, as conn_send()).
 */
int conn_send_data(Agent *a, const SbxMsg *msg, uint8_t *data);
/** Send an `error` {code, printf(@fmt)} and close the connection once it is written. */
void conn_fail(Agent *a, SbxErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Close the connection now, aborting any execution. */
void conn_close(Agent *a);
/** True when the host may be read: not closing, not past the queue marks (back-pressure). */
bool conn_wants_input(const Agent *a);
/** True if messages already read from the host wait to be handled (see link_buffered). */
bool conn_has_buffered(const Agent *a);
/** True when output and runner messages may be queued to the host (back-pressure). */
bool conn_wants_output(const Agent *a);

/* serial.c: the host over a virtio-serial port (see the file's comment) */
/* The port's name, as the host's QEMU command line gives it (host-agent/vm/qemu.h). */
#define SERIAL_PORT_NAME "sbx.agent"
/** Find and open the port, if the VM has one. */
void serial_init(Agent *a);
/** SIGIO (or an end of a connection): look at the port; attach a new host as a connection. */
void serial_check(Agent *a);
/** Reopen the port if a failed reopen is due for another try. */
void serial_on_timer(Agent *a, int64_t now);
/** The serial connection on @fd is about to close (before the fd is). */
void serial_conn_closing(Agent *a, int fd);
/** ... and it is closed: reopen the port, or drain what the attached host still sends. */
void serial_conn_closed(Agent *a);

/* host.c */
/** Act on one decoded message from the host (ownership of @msg's fields may be taken). */
void host_dispatch(Agent *a, SbxMsg *msg);
/** CONN_GREETING: send hello_ok once the pre-started runners are warm or the wait is over. */
void host_greeting_check(Agent *a, int64_t now);

/* exec.c */
/** Start the execution described by @msg (an execute message). */
void exec_start(Agent *a, SbxMsg *msg);
/** The host cancelled the execution: kill the process group; done says "cancelled". */
void exec_cancel(Agent *a);
/** Record that something went wrong (reported in done) and kill the process group. */
void exec_fail(Agent *a, SbxErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Kill and reap everything of the execution and free it, without a done (host is gone). */
void exec_abort(Agent *a);
/** The runner (@pid) is about to be reaped with @wstatus: its group is still intact. */
void exec_runner_exiting(Agent *a, pid_t pid);
/** The runner was reaped. */
void exec_runner_exited(Agent *a, pid_t pid, int wstatus);
/** Deadlines of the execution. */
void exec_on_timer(Agent *a, int64_t now);
/** If everything of the execution has ended, send done and free it. */
void exec_maybe_finish(Agent *a);

/* runner.c */
/** True if messages already read from the runner wait to be handled (see link_buffered). */
bool runner_has_buffered(const Agent *a);
/** Handle poll events on the runner channel. */
void runner_on_events(Agent *a, short revents);
/** Read every message already in the channel (the runner exited), then close it. */
void runner_drain(Agent *a);
/** Send @msg to the runner and try to write at once. */
void runner_send(Agent *a, const SbxMsg *msg);
/** The host answered a tool call: pass it on if it is awaited. */
void runner_tool_result(Agent *a, SbxMsg *msg);

/* output.c */
/** Handle poll events on the pipe of @stream. */
void output_on_events(Agent *a, SbxStream stream);
/**
 * One read of the pipe of @stream, sent as output (within the limit). Returns the bytes read,
 * 0 at EOF (the pipe is closed), -EAGAIN when it is empty.
 */
int output_read(Agent *a, SbxStream stream);

/* done.c */
/* Text the agent writes into a done (strings of the message point here). */
typedef struct DoneText {
    char type[32];     /* "SIGSEGV" */
    char message[128]; /* "process exited with status 3" */
} DoneText;
/** Build the done message of @e at time @now into @out; strings are borrowed from @e, @text. */
void done_build(const Exec *e, int64_t now, SbxMsg *out, DoneText *text);

/* spawn.c */
/**
 * The language whose runner runs @lang: JavaScript for TypeScript (node's runner strips the
 * types itself, seeing the execute's language), else @lang.
 */
SbxLanguage spawn_runner_language(SbxLanguage lang);
/** True if the runtime and runner of @lang exist. */
bool spawn_available(const AgentOptions *o, SbxLanguage lang);
/**
 * Start the runner of @lang in its own process group. On success *@ret_pid, *@ret_chan (our
 * end of the channel) and @ret_pipes (read ends of stdout, stderr) are set, all non-blocking.
 * Returns 0 or -errno (the runtime could not be started).
 */
int spawn_runner(const AgentOptions *o, SbxLanguage lang, pid_t *ret_pid, int *ret_chan,
                 int ret_pipes[SBX_STREAM__COUNT]);
/**
 * SIGKILL the process group @pgid and what escaped it: with --run-as every process of that
 * user, else every child of ours (orphans land with us: we are init or a subreaper); the
 * @nkeep processes of @keep (pre-started runners still waiting) are spared.
 */
void spawn_kill_all(const AgentOptions *o, pid_t pgid, const pid_t *keep, size_t nkeep);

/* seccomp.c */
/**
 * Set no_new_privs and install the runner's syscall filter (io_uring_* fail with ENOSYS) on the
 * calling process; inherited across fork and exec, never removable. Returns 0 or -errno.
 */
int seccomp_runner_install(void);

/* prestart.c */
/** Start one runner per available language (unless --no-prestart) and ping each. */
void prestart_all(Agent *a);
/**
 * Ask the warm runners to run their warm-up again, once (a second ping; they answer when done,
 * and an execute waits for it). In a VM restored from a snapshot under TCG the emulator's
 * translated code is gone, so the first execution would pay for translating every path again;
 * called at a hello with warm_up (a pooled VM, before it is offered).
 */
void prestart_rewarm(Agent *a);
/** True when every pre-started runner still alive has answered its pings (is warm). */
bool prestart_all_ready(const Agent *a);
/** The pids of the pre-started runners still alive, into @keep; returns how many. */
size_t prestart_pids(const Agent *a, pid_t keep[SBX_LANG__COUNT]);
/** Handle poll events on the channel of the pre-started runner of @lang. */
void prestart_on_events(Agent *a, SbxLanguage lang);
/** A child was reaped: if it was a pre-started runner, forget it. */
void prestart_reaped(Agent *a, pid_t pid);
/**
 * Hand over the waiting runner of @lang (JavaScript's for TypeScript): *@ret_pid, *@ret_chan
 * (moved; it was pinged) and @ret_pipes, with what it wrote while waiting discarded. False if
 * there is none (or it died).
 */
bool prestart_take(Agent *a, SbxLanguage lang, pid_t *ret_pid, Link *ret_chan,
                   int ret_pipes[SBX_STREAM__COUNT]);
/** Kill and reap the pre-started runners (the agent exits). */
void prestart_stop(Agent *a);

/* kept.c */
/** No runner kept yet. */
void kept_init(Agent *a);
/**
 * Keep the runner of @lang after a keep execute's done: @pid, @chan (moved) and @pipes
 * (moved; -1 for one at EOF).
 */
void kept_store(Agent *a, SbxLanguage lang, pid_t pid, Link *chan, int pipes[SBX_STREAM__COUNT]);
/**
 * Hand over the kept runner of @lang (JavaScript's for TypeScript) to an execute, with what it
 * wrote meanwhile discarded. Returns 1 (taken: *@ret_pid, *@ret_chan moved, @ret_pipes set),
 * 0 (none), or -ESRCH: the runner kept for it died between executes (its state is gone; said
 * once).
 */
int kept_take(Agent *a, SbxLanguage lang, pid_t *ret_pid, Link *ret_chan,
              int ret_pipes[SBX_STREAM__COUNT]);
/** The pids of the kept runners, into @keep; returns how many. */
size_t kept_pids(const Agent *a, pid_t keep[SBX_LANG__COUNT]);
/** Handle poll events on the channel of the kept runner of @lang. */
void kept_on_chan(Agent *a, SbxLanguage lang);
/** Handle poll events on the pipe @stream of the kept runner of @lang: read and drop. */
void kept_on_pipe(Agent *a, SbxLanguage lang, SbxStream stream);
/** A child is about to be reaped (its group still intact): a kept runner is lost. */
void kept_exiting(Agent *a, pid_t pid);
/** Kill and reap the kept runners and what they left (the connection ended); forget them. */
void kept_stop_all(Agent *a);

/* files.c */
/** Create the workspace if missing (0700, the --run-as user's) and open it. */
void files_init(Agent *a);
/** A `file` request from the host: do it and answer with its file_result. */
void files_on_request(Agent *a, const SbxFile *f);
/** Drop an unfinished write (its temporary file is removed). */
void files_abort(Agent *a);

/* loop.c */
/** Serve connections until SIGTERM/SIGINT (never, as PID 1). Returns 0 or -errno of poll(). */
int agent_run(Agent *a);

/* pid1.c */
/** Block and route signals; returns a signalfd or -errno. */
int pid1_signals_init(bool pid1);
/** Undo pid1_signals_init() in a child before exec. */
void pid1_signals_reset(void);
/** Read the signalfd: reap children, note SIGTERM/SIGINT. */
void pid1_on_signals(Agent *a);
/** A fatal error: exit, or as PID 1 sync and power off (so that QEMU exits). */
void pid1_fatal(const Agent *a, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/* entropy.c */
/** Mix @len bytes into the kernel RNG; @credit them (RNDADDENTROPY, root only) when asked. */
int entropy_add(const uint8_t *buf, size_t len, bool credit);
/** Set CLOCK_REALTIME to @time_us microseconds since the epoch. Returns 0 or -errno. */
int clock_set_us(int64_t time_us);
