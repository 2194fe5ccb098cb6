/*
 * Sessions (docs/sessions.md): a VM kept for one tenant across executions, like a notebook. A
 * session claims a VM from its profile's pool and holds it in a lease (exec/lease.h); its
 * executions are the server's jobs like any other (queued per tenant, run in turn) but borrow
 * the session's VM, one at a time, and ask the guest to keep its runner's state; between them
 * its workspace's files can be moved in and out. An idle timeout and a maximum lifetime end it;
 * so do a delete, an execution after which the guest kept no state (its runtime exited, a
 * timeout, a cancel), the VM's death and the server's end. Ending it kills the VM. A session's
 * VM is never handed to anyone else.
 *
 * Every front end (the Unix socket, the HTTP API) uses this module; the state machine is here.
 */
#pragma once

#include <gio/gio.h>

#include "server/server.h"

/* Errors of session requests, for the front ends to map (HTTP: 404, 409, 429, 503). */
#define SBX_SERVER_SESSION_ERROR (sbx_server_session_error_quark())
GQuark sbx_server_session_error_quark(void);

typedef enum {
    SBX_SERVER_SESSION_ERROR_NOT_FOUND, /* no such session (of this tenant) */
    SBX_SERVER_SESSION_ERROR_BUSY,      /* an execution runs in it: one at a time */
    SBX_SERVER_SESSION_ERROR_ENDED,     /* it has ended */
    SBX_SERVER_SESSION_ERROR_QUOTA, /* the tenant's sessions (count or memory) are at their quota */
    SBX_SERVER_SESSION_ERROR_FULL,  /* the server holds as many sessions as it may */
    SBX_SERVER_SESSION_ERROR_START, /* its VM could not be started */
} SbxServerSessionError;

/*
 * Sessions at once over the whole server, unless `serve --max-sessions` says otherwise. Each
 * holds a VM (the profile's RAM, ~117 MB copied for the default profile, plus QEMU's own)
 * while it idles: 16 is ~3 GiB on the 24 GiB hosts this runs on, leaving the pools and the
 * one-shot executions room.
 */
#define SBX_SERVER_SESSIONS_MAX 16

/*
 * Idle timeout and maximum lifetime: the defaults and the largest a request may ask for. A
 * notebook's pause for thought is minutes; a day bounds what a forgotten session costs.
 */
#define SBX_SERVER_SESSION_IDLE_DEFAULT_S (10 * 60)
#define SBX_SERVER_SESSION_IDLE_MAX_S (24 * 60 * 60)
#define SBX_SERVER_SESSION_LIFETIME_DEFAULT_S (60 * 60)
#define SBX_SERVER_SESSION_LIFETIME_MAX_S (24 * 60 * 60)

/*
 * Ended sessions kept in memory for their clients' GETs (the records keep them all): a few
 * hundred bytes each.
 */
#define SBX_SERVER_SESSIONS_ENDED_KEPT 256

typedef struct SbxServerSession SbxServerSession;

typedef enum {
    SBX_SERVER_SESSION_STARTING, /* its VM is being claimed */
    SBX_SERVER_SESSION_READY,    /* idle: an execution or a file operation may start */
    SBX_SERVER_SESSION_BUSY,     /* an execution runs, or a file operation */
    SBX_SERVER_SESSION_ENDED,
} SbxServerSessionState;

/* What a new session asks for. Strings are copied. */
typedef struct {
    guint profile;          /* index of the pooled profile */
    const char *tenant_id;  /* NULL: the local clients */
    const char *front_end;  /* "serve", "http" */
    guint idle_timeout_s;   /* 0: the default */
    guint max_lifetime_s;   /* 0: the default */
    guint max_sessions;     /* the tenant's quota of sessions at once; 0: none */
    guint64 max_memory_mib; /* the tenant's quota of their VMs' memory; 0: none */
} SbxServerSessionRequest;

/** The session's start ended: @error NULL = ready. From the main loop, once. */
typedef void (*SbxServerSessionReadyFunc)(SbxServerSession *session, const GError *error,
                                          gpointer data);

/**
 * Open a session: checks the quotas and the server's room (SBX_SERVER_SESSION_ERROR_QUOTA, _FULL),
 * records it, and claims its VM; @ready (optional) runs once it is ready or failed. Returns a
 * reference (sbx_server_session_unref()); the server holds its own until the session ended.
 */
SbxServerSession *sbx_server_session_new(SbxServer *srv, const SbxServerSessionRequest *req,
                                         SbxServerSessionReadyFunc ready, gpointer data,
                                         GError **error);

/** @tenant_id's session @id (NULL: local), open or recently ended, else NULL. Not a reference. */
SbxServerSession *sbx_server_session_find(SbxServer *srv, const char *tenant_id, const char *id);

/** @tenant_id's sessions in memory (open ones and the recently ended), newest first. Refs. */
GPtrArray *sbx_server_sessions_list(SbxServer *srv, const char *tenant_id);

/** Sessions of @tenant_id that are not ended, and their VMs' memory in MiB. */
guint sbx_server_sessions_open(SbxServer *srv, const char *tenant_id, guint64 *ret_memory_mib);

/**
 * End @session now with @status ("deleted", "expired", ...) and @reason: an execution running
 * in it is aborted, its VM killed, its record ended. No-op once ended.
 */
void sbx_server_session_end(SbxServerSession *session, const char *status, const char *reason);

/**
 * Whether an execution may be submitted now (sbx_server_submit() with this session): ready and
 * not running one; else FALSE with SBX_SERVER_SESSION_ERROR_BUSY, _ENDED (or _START while
 * starting).
 */
gboolean sbx_server_session_can_run(SbxServerSession *session, GError **error);

/**
 * Run @func once the session's channel is free for a file operation (from the loop: at once,
 * or when the execution before it gave the VM back), with the channel, or with an error (the
 * session ended first). The session is busy until sbx_server_session_channel_done(). If the
 * session ends while the operation has the channel, @abort runs first: the operation must stop
 * using the channel at once (its channel is freed right after) and report its own end.
 */
typedef void (*SbxServerSessionChannelFunc)(SbxServerSession *session, SbxSession *channel,
                                            const GError *error, gpointer data);
gboolean sbx_server_session_with_channel(SbxServerSession *session,
                                         SbxServerSessionChannelFunc func, GCallback abort,
                                         gpointer data, GError **error);

/**
 * The file operation of sbx_server_session_with_channel() is over. @broken: it broke the
 * channel (a guest's breach, no answer): the session ends, with @why.
 */
void sbx_server_session_channel_done(SbxServerSession *session, gboolean broken, const char *why);

const char *sbx_server_session_id(const SbxServerSession *session);

/*
 * A file of the workspace was put or deleted from outside an execution: the executions after it
 * cannot be replayed (a record keeps no file contents; docs/replay.md).
 */
void sbx_server_session_mark_files_changed(SbxServerSession *session);
gboolean sbx_server_session_files_changed(const SbxServerSession *session);
const char *sbx_server_session_tenant(const SbxServerSession *session); /* NULL: local */
SbxServerSessionState sbx_server_session_state(const SbxServerSession *session);
const char *sbx_server_session_state_name(const SbxServerSession *session);
guint sbx_server_session_profile(const SbxServerSession *session);

/* A session's view for a status answer (strings owned by the session). */
typedef struct {
    const char *id;
    const char *state;     /* "starting", "ready", "busy", "ended" */
    const char *profile;   /* its name */
    gint64 created_ms;     /* unix ms */
    gint64 last_active_ms; /* the end of its last execution or file operation (unix ms) */
    gint64 expires_ms;     /* when it ends unless used (the idle timeout or the lifetime) */
    gint64 ended_ms;       /* 0 while open */
    guint idle_timeout_s;
    guint max_lifetime_s;
    guint executions; /* executions submitted in it */
    guint64 memory_mib;
    const char *end_status; /* when ended: "deleted", "expired", "crashed", "interrupted" */
    const char *end_reason;
    const char *current_execution; /* the id of the one running, or NULL */
} SbxServerSessionInfo;

void sbx_server_session_info(const SbxServerSession *session, SbxServerSessionInfo *out);

/** Open sessions of profile @profile; their QEMUs' PIDs appended to @pids (GPid). */
guint sbx_server_sessions_of_profile(SbxServer *srv, guint profile, GArray *pids);

/** The session's VM's QEMU PID, 0 if none (tests, status). */
GPid sbx_server_session_qemu_pid(SbxServerSession *session);

SbxServerSession *sbx_server_session_ref(SbxServerSession *session);
void sbx_server_session_unref(SbxServerSession *session);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxServerSession, sbx_server_session_unref)

/* ---- for server.c ---------------------------------------------------------------------------- */

typedef struct SbxServerSessions SbxServerSessions;

SbxServerSessions *sbx_server_sessions_new(SbxServer *srv, guint max_sessions);
/** End every session ("interrupted": the server is shutting down). */
void sbx_server_sessions_shutdown(SbxServerSessions *all);
void sbx_server_sessions_free(SbxServerSessions *all);

/** A job of @session is submitted: the source that lends it the VM (marks the session busy). */
SbxExecSource *sbx_server_session_lend(SbxServerSession *session, const char *exec_id);

/** That job's execution is over: the session learns whether the guest kept its state. */
void sbx_server_session_job_done(SbxServerSession *session, SbxExec *exec);
