/*
 * Session records (docs/service.md, "Sessions"): a session is a VM a tenant keeps for several
 * executions, from its opening to its end (idle timeout, maximum lifetime, a delete, a crash).
 * Its executions are execution records naming it (records.h, session_id). The session manager
 * writes these; nothing here knows a VM.
 */
#pragma once

#include "db.h"

/* Why a session ended, as kept: 1 KiB says any reason a person reads (an idle timeout, a QEMU
 * exit with its signal); a longer one (a failure's text) is cut, never refused, since an end
 * must be recorded whatever its reason says. */
#define SBX_SESSION_REASON_MAX 1024

/* The status of a session not ended yet; every other status is an end. */
#define SBX_SESSION_STATUS_OPEN "open"

typedef struct {
    char *id;               /* as an execution id (sbx_id_valid()) */
    char *tenant_id;        /* NULL: no tenant (a server without tenants) */
    char *profile;          /* the machine profile's name */
    guint64 memory_mib;     /* its VM's memory (what max_session_memory_mib counts); 0: unknown */
    gint64 created_at_ms;   /* unix ms; 0 at sbx_session_records_begin(): now */
    gint64 idle_timeout_ms; /* 0: none */
    gint64 max_lifetime_ms; /* 0: none */
    char *status;           /* "open", then "ended", "expired", "crashed", "interrupted",
                               "deleted" */
    char *reason;           /* why it ended (UTF-8, at most SBX_SESSION_REASON_MAX), or NULL */
    gint64 ended_at_ms;     /* 0 while open */
    guint64 executions;     /* read: how many execution records name it (retention kept) */
} SbxSessionRecord;

typedef struct {
    const char *tenant_id; /* NULL: every tenant's and those of no tenant */
    const char *status;    /* NULL: any */
    /* The cursor: sessions older than (created_at, id) of the last one of the previous page
     * (newest first); cursor_id NULL: from the newest. */
    gint64 cursor_created_ms;
    const char *cursor_id;
    guint limit; /* 0: SBX_RECORDS_LIST_DEFAULT; capped at SBX_RECORDS_LIST_MAX (records.h) */
} SbxSessionFilter;

void sbx_session_record_free(SbxSessionRecord *session);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxSessionRecord, sbx_session_record_free)

/** Whether @status is one a session ends with (not "open"): ended, expired, crashed, ... */
gboolean sbx_session_records_end_status_valid(const char *status);

/**
 * Record that session @s->id opens (status "open"), with its tenant, profile, memory, times
 * and timeouts; status, reason, ended_at_ms and executions are ignored.
 * SBX_STORE_ERROR_INVALID if a field breaks a rule, SBX_STORE_ERROR_EXISTS if the id is taken.
 */
gboolean sbx_session_records_begin(SbxStore *store, const SbxSessionRecord *s, GError **error);

/**
 * Record the end of open session @id: @status (sbx_session_records_end_status_valid()),
 * @reason (NULL: none; made valid UTF-8 and cut at SBX_SESSION_REASON_MAX bytes), @ended_at_ms
 * (0: now). SBX_STORE_ERROR_NOT_FOUND if there is no such session, SBX_STORE_ERROR_EXISTS if
 * it has ended already (the first end stays).
 */
gboolean sbx_session_records_end(SbxStore *store, const char *id, const char *status,
                                 const char *reason, gint64 ended_at_ms, GError **error);

/**
 * Session @id. With @tenant_id, only a session of that tenant: another's is
 * SBX_STORE_ERROR_NOT_FOUND, as a missing one (NULL: any, the operator's view).
 */
gboolean sbx_session_records_get(SbxStore *store, const char *tenant_id, const char *id,
                                 SbxSessionRecord **ret, GError **error);

/**
 * Sessions matching @f (NULL: all), newest first, at most its limit (SbxSessionRecord *).
 * A session's executions: sbx_records_list() with SbxRecordFilter.session_id.
 */
gboolean sbx_session_records_list(SbxStore *store, const SbxSessionFilter *f, GPtrArray **ret,
                                  GError **error);

/**
 * @s as a JSON object (id, tenant_id, profile, memory_mib, created_at, idle_timeout_ms,
 * max_lifetime_ms, status, reason, ended_at, executions), a new string.
 */
char *sbx_session_record_to_json(const SbxSessionRecord *s);
