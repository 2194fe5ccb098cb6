/*
 * Inside the HTTP front end (http.h): http.c owns the listener, the connections, routing,
 * authentication, quotas and error answers; http-exec.c the executions (their state, events,
 * waiters, listings); http-object.c their JSON object; http-stored.c the ones read back from
 * the store (forgotten, or from before a restart); http-approvals.c the approvals of a
 * tenant's executions; http-request.c the creation body's decoder; http-mcp.c `/mcp` (MCP over
 * streamable HTTP, its calls in http-mcp-calls.c, its catalogs' listings in
 * http-mcp-listing.c, what those share in http-mcp-private.h).
 */
#pragma once

#include <libsoup/soup.h>

#include "server/http-request.h"
#include "server/http.h"
#include "store/records.h"
#include "store/tenants.h"
#include "tools.h"

/*
 * A request body: a program (SBX_HTTP_CODE_MAX) escaped in JSON can grow (a quote becomes two
 * bytes), the files given to it (SBX_EXEC_FILES_IN_BYTES_MAX, 4 MiB, are 5.4 MiB of base64),
 * plus the other members: 7 MiB + 64 KiB. Beyond, 413 without reading the body.
 */
#define SBX_HTTP_BODY_MAX (7u * 1024 * 1024 + 64 * 1024)

/*
 * Request bodies held at once, over all connections, as their Content-Length announces them
 * (a body is read whole before its handler runs, and a file's stays until the guest has it):
 * 128 MiB is four files of 32 MiB in flight, or eighteen executions with their files, where
 * 256 connections could otherwise hold 8 GiB. A body is counted only once its key checked out
 * (401 before it is read otherwise), and one tenant holds at most half, so one tenant cannot
 * keep the others out. Beyond, 503 with Retry-After before the body is read.
 */
#define SBX_HTTP_BODIES_HELD_MAX (128u * 1024 * 1024)
#define SBX_HTTP_TENANT_BODIES_HELD_MAX (SBX_HTTP_BODIES_HELD_MAX / 2)

/*
 * Connections at once. Each costs an fd, libsoup's buffers and, while it streams events, a
 * write queue; 256 covers many clients following executions, and bounds what a flood holds.
 * Beyond, new connections are closed at once.
 */
#define SBX_HTTP_CONNECTIONS_MAX 256

/*
 * A request's headers must arrive within this (a slowloris sending a byte a second is cut
 * off), and its body within SBX_HTTP_BODY_TIMEOUT_S after them (7 MiB in 30 s is 250 KB/s).
 */
#define SBX_HTTP_HEADER_TIMEOUT_S 10
#define SBX_HTTP_BODY_TIMEOUT_S 30

/* A connection with nothing to read or write for this long is closed (keep-alive included). */
#define SBX_HTTP_IDLE_TIMEOUT_S 60

/* A `?wait=` holds the answer at most this long (clients poll again for longer runs). */
#define SBX_HTTP_WAIT_MAX_S 300

/*
 * The events kept per execution for streams that start later: its output is bounded by its
 * output limit (at most 1 GiB for a tenant allowed that), but what is kept here for a replay
 * is bounded apart: past 16 MiB, later events are streamed live only (the replay says so).
 */
#define SBX_HTTP_EVENTS_KEPT_MAX (16u * 1024 * 1024)

/*
 * Bytes an event stream may have queued for a client that does not read: past it, that stream
 * ends (the execution goes on; the client can fetch it). Bounds memory per slow reader.
 */
#define SBX_HTTP_STREAM_QUEUE_MAX (16u * 1024 * 1024)

/*
 * Finished executions kept in memory, for fetching, listing and streaming their events: the
 * oldest go first. Each holds its output (up to its limit) and events.
 */
#define SBX_HTTP_FINISHED_KEPT 1024
/*
 * And at most this many bytes of them (objects and kept events) together: a tenant's output
 * limit may reach 1 GiB, so 1024 finished executions alone could hold terabytes. Past it the
 * oldest are forgotten too, also a single larger one at once: the store still answers for them
 * (http-stored.c, output up to the record's 1 MiB per stream).
 */
#define SBX_HTTP_FINISHED_BYTES_MAX (256u * 1024 * 1024)

/* A page of a listing: at most 100 executions, 20 unless asked. */
#define SBX_HTTP_LIST_MAX 100
#define SBX_HTTP_LIST_DEFAULT 20

typedef struct HttpExec HttpExec;

typedef struct {
    SbxServer *srv;
    SbxStore *store;
    char *catalogs_dir;
    SoupServer *soup;
    GSocketListener *listener;
    GCancellable *accept_cancel;
    guint16 port;
    gboolean https;
    GTlsCertificate *tls_cert; /* HTTPS: every accepted connection gets a TLS layer with it */
    GList *conns;              /* HttpConn* */
    GHashTable *execs;         /* id -> HttpExec* */
    GQueue finished;           /* HttpExec*, oldest first */
    gsize finished_bytes;      /* what they hold (SBX_HTTP_FINISHED_BYTES_MAX) */
    guint64 bodies_held;       /* announced by requests not finished (SBX_HTTP_BODIES_HELD_MAX) */
    GHashTable *tenant_bodies; /* tenant id -> guint64*: their part of bodies_held */
    GHashTable *recent_starts; /* tenant id -> GQueue of gint64 (monotonic us), last minute */
    gboolean closing;
    guint64 closed_unanswered; /* connections closed by the caps and deadlines */
    gint64 closed_noted_us;    /* when that was last logged (monotonic) */
    gboolean loopback;         /* listening on a loopback address (http-mcp.c's Host check) */
    GHashTable *mcp_sessions;  /* id -> the MCP sessions of /mcp (http-mcp.c) */
    guint mcp_sweep;
    GList *mcp_held;          /* the initialize POSTs waiting for their catalog's listing */
    GHashTable *mcp_listings; /* catalog name -> its current listing (http-mcp-listing.c) */
    GList *replays;           /* the replays running (http-replay.c) */
} HttpFront;

/* http.c, for the other files */
/** Answer @msg with JSON @body (taken) and @status. */
void sbx_http_reply_json(SoupServerMessage *msg, guint status, char *body);
/** Answer @msg with an error: {"error":{"code":@code,"message":@message}}. */
void sbx_http_reply_error(SoupServerMessage *msg, guint status, const char *code,
                          const char *message);
/** Answer 405 with the methods @allow ("GET, POST"). */
void sbx_http_reply_method(SoupServerMessage *msg, const char *allow);
/** Whether every member of @query is one of @allowed (NULL-terminated); else answered 400. */
gboolean sbx_http_query_only(SoupServerMessage *msg, GHashTable *query, const char *const *allowed);
/** Whether @msg's method is @method. */
gboolean sbx_http_is(SoupServerMessage *msg, const char *method);
/**
 * Whether @tenant may start an execution now (concurrency, per minute: its replays count as its
 * executions); else answered 429.
 */
gboolean sbx_http_within_quota(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant);
/**
 * NULL if @tenant may start an execution now, else why not (caller frees), with the seconds
 * after which to try again in *@ret_retry_s.
 */
char *sbx_http_quota_refusal(HttpFront *front, const SbxTenant *tenant, guint *ret_retry_s);

/* http-exec.c */
/* What another front end (the MCP transport) hears of an execution it started. */
typedef struct {
    /* Output as it comes (optional). */
    void (*output)(gpointer data, SbxStream stream, const guint8 *bytes, gsize len);
    /* The end: the execution's object as the API shows it (docs/api.md), with its output. */
    void (*done)(gpointer data, const char *object_json);
} SbxHttpExecWatch;

/**
 * Start an execution of @req for @tenant (quotas checked by the caller), in @session or NULL,
 * recorded with @front_end; it is listed, fetched and cancelled like the API's. NULL with
 * @error when it cannot start (its catalog, the server's queues).
 */
HttpExec *sbx_http_exec_start(HttpFront *front, const SbxTenant *tenant, const SbxHttpCreate *req,
                              SbxServerSession *session, const char *front_end, GError **error);
/** Have @watch called with @data for @e until its done (NULL: no more). */
void sbx_http_exec_watch(HttpExec *e, const SbxHttpExecWatch *watch, gpointer data);
/** End @e now, cancelled for @why (nothing if it has ended). */
void sbx_http_exec_cancel(HttpExec *e, const char *why);
/**
 * The socket of @msg's connection (the server accepts them itself: libsoup's own
 * soup_server_message_get_socket() is NULL), or NULL if it is gone.
 */
GSocket *sbx_http_socket_of(HttpFront *front, SoupServerMessage *msg);
/* http-replay.c */
/** POST /v1/executions/{@id}/replay of @tenant: the verdict once the replay ended. */
void sbx_http_replay(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                     const char *id, GHashTable *query);
/** Stop and forget every replay (the front end's end). */
void sbx_http_replays_free(HttpFront *front);
/** Replays running, of @tenant_id (NULL: of every tenant). */
guint sbx_http_replays_running(HttpFront *front, const char *tenant_id);
/** @prefix and @n_bytes random bytes in hex: an id that is unique, not secret. */
char *sbx_http_random_id(const char *prefix, gsize n_bytes);
/** The tools of @catalog (NULL: none) from the operator's catalogs. */
SbxTools *sbx_http_load_tools(HttpFront *front, const char *catalog, GError **error);
/**
 * POST /v1/executions, or POST /v1/sessions/{id}/executions with @session (else NULL), for
 * @tenant (authenticated, quotas checked by the caller).
 */
void sbx_http_exec_create(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                          GHashTable *query, SbxServerSession *session);
/** GET /v1/executions/{id}, POST .../cancel, GET .../events: @rest is what follows the id. */
void sbx_http_exec_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                         const char *id, const char *rest, GHashTable *query);
/** GET /v1/executions: the tenant's, newest first. */
void sbx_http_exec_list(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                        GHashTable *query);
/** The execution @id if it is @tenant_id's, else NULL. */
HttpExec *sbx_http_exec_find(HttpFront *front, const char *tenant_id, const char *id);
/** The id of the execution whose job made approval origin @origin, or NULL. */
const char *sbx_http_exec_of_origin(const char *origin);
/** The approval @approval_id started waiting for @exec: its event. */
void sbx_http_exec_approval(HttpExec *exec, const char *json);
/** Free @exec (its job, if still running, detached and aborted). */
void sbx_http_exec_free_one(HttpExec *exec);
/** Whether @exec already emitted approval @approval_id (it is noted as emitted now). */
gboolean sbx_http_exec_seen_approval(HttpExec *exec, const char *approval_id);
/** The execution's id. */
const char *sbx_http_exec_id(HttpExec *exec);
/** End every event stream (closing). */
void sbx_http_exec_end_streams(HttpFront *front);
/** Free every execution (the server's jobs are gone or detached). */
void sbx_http_exec_free_all(HttpFront *front);
/** Executions started by @tenant_id in the last minute (for the per-minute quota). */
guint sbx_http_exec_started_last_minute(HttpFront *front, const char *tenant_id,
                                        gint64 *ret_oldest_us);
/** Note a start of @tenant_id now. */
void sbx_http_exec_note_start(HttpFront *front, const char *tenant_id);

/* http-session.c */
/** /v1/sessions...: @rest is what follows "/v1/sessions". */
void sbx_http_session_route(HttpFront *front, SoupServerMessage *msg, const char *rest,
                            GHashTable *query, const SbxTenant *tenant);

/* http-files.c */
/** /v1/sessions/{id}/files...: @rest is what follows "/files" ("" or "/PATH"). */
void sbx_http_files_route(HttpFront *front, SoupServerMessage *msg, SbxServerSession *session,
                          const char *rest, GHashTable *query);

/* http-stored.c */
/** One execution of a listing: its summary and where it sorts (newest first, then by id). */
typedef struct {
    gint64 created_us;
    char *id;
    char *json; /* the summary */
} SbxHttpListItem;
void sbx_http_list_item_free(SbxHttpListItem *item);
/**
 * GET /v1/executions/{id}, .../events and POST .../cancel of an execution not in memory, from
 * its record (@rest as for sbx_http_exec_route()). FALSE if @tenant has no such record: not
 * answered (404 is the caller's).
 */
gboolean sbx_http_stored_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                               const char *id, const char *rest);
/** Append to @items (SbxHttpListItem *) the records @f finds that are not in memory. */
gboolean sbx_http_stored_page(HttpFront *front, const SbxRecordFilter *f, GPtrArray *items,
                              GError **error);
/* http-mcp.c */
/** /mcp: MCP over streamable HTTP for @tenant (authenticated). */
void sbx_http_mcp_route(HttpFront *front, SoupServerMessage *msg, GHashTable *query,
                        const SbxTenant *tenant);
/** Set up the MCP sessions' table. */
void sbx_http_mcp_init(HttpFront *front);
/** End every MCP session (their calls cancelled, open answers ended). */
void sbx_http_mcp_close(HttpFront *front);
/** Free what sbx_http_mcp_init() set up (after sbx_http_mcp_close()). */
void sbx_http_mcp_free(HttpFront *front);
/**
 * The server's approvals changed (http-approvals.c's watcher tells): each new one of an
 * execution an MCP call started, whose client can be asked, is asked on that call's stream
 * (elicitation); a question whose approval stopped waiting is withdrawn.
 */
void sbx_http_mcp_approvals_changed(HttpFront *front);

/* http-mcp-listing.c */
typedef struct SbxHttpListing SbxHttpListing;
typedef void (*SbxHttpListingFunc)(gpointer data);
/**
 * The listing of the operator's catalog @name for the discovery tools (its MCP providers' tools
 * asked), shared, started if there is none of its file as it is now: a reference. NULL with
 * @error when the catalog cannot be loaded.
 */
SbxHttpListing *sbx_http_listing_get(HttpFront *front, const char *name, GError **error);
void sbx_http_listing_unref(SbxHttpListing *listing);
/** Whether the listing ended (its tools listed, or not: sbx_http_listing_catalog() says). */
gboolean sbx_http_listing_ready(const SbxHttpListing *listing);
/** The catalog with its MCP providers' tools, once ready; NULL before or if that failed. */
const SbxCatalog *sbx_http_listing_catalog(const SbxHttpListing *listing);
/** Call @func(@data) once, from the loop, when the listing is ready. */
void sbx_http_listing_wait(SbxHttpListing *listing, SbxHttpListingFunc func, gpointer data);
/** No more wait for @data (its request went away). */
void sbx_http_listing_unwait(SbxHttpListing *listing, gpointer data);
void sbx_http_listings_init(HttpFront *front);
/** Drop the front's listings (those sessions hold stay until their sessions end). */
void sbx_http_listings_free(HttpFront *front);

/* http-approvals.c */
/** GET /v1/approvals and POST /v1/approvals/{id} (@id NULL for the list). */
void sbx_http_approvals_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                              const char *id);
/**
 * Watch the server's approvals: each new one of an execution of ours becomes its event, and
 * /mcp is told (sbx_http_mcp_approvals_changed()).
 */
void sbx_http_approvals_watch(HttpFront *front);
