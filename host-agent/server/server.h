/*
 * The server behind `sandbox serve` (docs/pool.md, docs/api.md): the pooled profiles (their
 * images, snapshots, pre-started QEMUs and warm pools), the approvals of every execution, and
 * the jobs: executions on the execution core (exec/exec.h) with a VM claimed from a pool, run a
 * bounded number at a time. Jobs wait in one queue per tenant (local clients are one tenant of
 * their own), and a free slot goes to the queues in turn, so a tenant flooding requests does not
 * starve another. The front ends (unix.c: the owner's Unix socket; http.c: the HTTP API) parse
 * requests, submit jobs and forward their events; the work is here and in exec/.
 */
#pragma once

#include <gio/gio.h>

#include "approvals.h"
#include "exec/exec.h"
#include "pool.h"
#include "profile.h"
#include "store/db.h"

/*
 * Executions at once. Each holds a VM (~117 MB of RAM copy plus QEMU) and under TCG keeps a
 * core busy while its program runs: on this 2-core machine 4 keeps both cores fed (a VM waits
 * on its guest, tools or I/O part of the time) without the refills starving. Requests beyond
 * wait in their tenant's queue.
 */
#define SBX_SERVER_RUNNING_MAX 4

/*
 * Profiles pooled at once (--profile given several times). Each has its own pool, pre-started
 * QEMUs and snapshot (made at start if missing: ~10-20 s each under TCG), and its pool's
 * restores run besides the others' (two at a time each); 4 covers the shipped profiles that
 * restore here, while the totals of --pool and --prestart stay under their caps.
 */
#define SBX_SERVER_PROFILES_MAX 4

/*
 * Jobs queued at once over all tenants: each holds its code (up to 4 MiB) until it runs. 1024
 * is far more than the slots work off in a minute; beyond, submissions are refused (503).
 */
#define SBX_SERVER_QUEUED_MAX 1024

typedef struct SbxServer SbxServer;
typedef struct SbxServerJob SbxServerJob;
typedef struct SbxServerSession SbxServerSession;
typedef struct SbxServerSessions SbxServerSessions;

/* One pooled profile's configuration. */
typedef struct {
    const char *name;
    guint pool_size; /* VMs kept ready */
    guint prestart;  /* QEMUs kept started for restores on demand */
} SbxServerProfileConfig;

typedef struct {
    const SbxServerProfileConfig *profiles; /* the first serves requests that name none */
    guint n_profiles;                       /* 1..SBX_SERVER_PROFILES_MAX */
    gboolean no_warm_up;                    /* offer pooled VMs without the runners' warm-up */
    /* Where every job's execution is recorded (docs/service.md, "Records"); NULL: nowhere. */
    SbxStore *store;
    /* Sessions open at once over every tenant; 0: SBX_SERVER_SESSIONS_MAX (sessions.h). */
    guint max_sessions;
    /* Called when a snapshot is made at start (once per image and profile; blocks). */
    void (*on_make_snapshot)(const char *dir, gpointer data);
    gpointer data;
} SbxServerConfig;

/**
 * Load every profile, its image and its snapshot (made first if missing: blocks, before the
 * loop runs), and start the pools (their first restores come from the loop).
 */
SbxServer *sbx_server_new(const SbxServerConfig *config, GError **error);

/** Free the server: queued jobs are dropped, running ones killed (their sinks hear nothing). */
void sbx_server_free(SbxServer *srv);

/** The approvals pending in every job of the server (docs/tools.md, "Approvals"). */
SbxApprovals *sbx_server_approvals(SbxServer *srv);

/** The index of pooled profile @name (NULL: the default, 0); FALSE if it is not pooled. */
gboolean sbx_server_find_profile(SbxServer *srv, const char *name, guint *ret_index);

/** Number of pooled profiles; the name and pool of the @i-th. */
guint sbx_server_n_profiles(SbxServer *srv);
const char *sbx_server_profile_name(SbxServer *srv, guint i);

/* One pooled profile's state, for a status answer. Arrays are the caller's. */
typedef struct {
    guint pool_size, prestart, running;
    SbxPoolStats pool;
    GArray *ready_pids;      /* GPid: QEMUs of the ready VMs */
    GArray *running_pids;    /* GPid: QEMUs running an execution */
    GArray *prestarted_pids; /* GPid: pre-started QEMUs waiting */
    GArray *session_pids;    /* GPid: QEMUs held by open sessions (idle or running) */
    guint sessions;          /* sessions open */
} SbxServerProfileState;

/** The state of the @i-th profile (free the arrays with sbx_server_profile_state_clear()). */
void sbx_server_profile_state(SbxServer *srv, guint i, SbxServerProfileState *out);
void sbx_server_profile_state_clear(SbxServerProfileState *st);

/* What a job runs. The strings are copied. */
typedef struct {
    SbxExecRequest exec;
    guint profile;         /* index of the pooled profile */
    const char *front_end; /* its record's: "serve" (the Unix socket), "http" */
    const char *tenant_id; /* the queue it waits in and its record's tenant; NULL: local */
    const char *origin;    /* who asked, shown with its approvals ("sandbox run, pid N") */
    const char *catalog;   /* its record's: the catalog an API request named, or NULL */
    gint64 created_at_ms;  /* its record's: when the request came (unix ms); 0: at the start */
    /* Run in this session's VM (sessions.h; sbx_server_session_can_run() first), keeping the
     * guest's state; NULL: a VM of its own from the pool. */
    SbxServerSession *session;
} SbxServerRequest;

/**
 * Queue an execution of @req with @tools (taken) whose events go to @sink. It starts when a slot
 * is free and its queue's turn comes; the sink's done comes in any case (also when the server
 * shuts down); the job is freed by the server after done (from the loop): the front end drops
 * its pointer in done. NULL with @error if the server is stopping or the queues are full.
 */
SbxServerJob *sbx_server_submit(SbxServer *srv, const SbxServerRequest *req, SbxTools *tools,
                                const SbxExecSink *sink, gpointer sink_data, GError **error);

/** End the job now (a client gone, a cancel): queued, it is done at once; running, aborted. */
void sbx_server_job_abort(SbxServerJob *job, SbxStatus status, const char *why);

/** No more events to the sink (its client is gone); the job still ends and is freed. */
void sbx_server_job_detach(SbxServerJob *job);

/** The job's execution (for its outcome, report and VM), valid until the job is freed. */
SbxExec *sbx_server_job_exec(SbxServerJob *job);

/** Whether the job waits in its queue. */
gboolean sbx_server_job_queued(SbxServerJob *job);

/** Monotonic time (us) the job was submitted. */
gint64 sbx_server_job_submitted(SbxServerJob *job);

/** Jobs of @tenant_id (NULL: local) queued or running: a tenant's concurrency. */
guint sbx_server_tenant_jobs(SbxServer *srv, const char *tenant_id);

/**
 * Stop: no more submissions, the pools and pre-started QEMUs go, every job is aborted with
 * "the server is shutting down". @drained runs once no job is left (at once if none).
 */
void sbx_server_shutdown(SbxServer *srv, void (*drained)(gpointer data), gpointer data);

/** Whether the server is stopping. */
gboolean sbx_server_stopping(SbxServer *srv);

/** For sessions.c: the @i-th profile, its pool, the sessions' table, the store (or NULL). */
const SbxProfile *sbx_server_profile(SbxServer *srv, guint i);
SbxPool *sbx_server_profile_pool(SbxServer *srv, guint i);
SbxServerSessions *sbx_server_sessions(SbxServer *srv);
SbxStore *sbx_server_store(SbxServer *srv);
