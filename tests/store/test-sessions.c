/*
 * Session records (host-agent/store/sessions.c) and what touches them elsewhere in the store:
 * a session's opening and end (statuses, the reason's bound, a second end), tenant isolation,
 * paging, executions naming their session (the filter, oldest first, the count), sessions a
 * server left open ended at the next server's open (kill -9 too), retention never deleting an
 * open session nor one whose executions are left, the JSON form.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store-fixture.h"
#include "store/sessions.h"
#include "store/store-private.h"

#define TENANT_A "t_00000000000000aa"
#define TENANT_B "t_00000000000000bb"

static SbxStore *open_ok(const char *path)
{
    g_autoptr(GError) error = NULL;
    SbxStore *s = sbx_store_open(path, &error);
    if (s == NULL) {
        fail_msg("open %s: %s", path, error->message);
    }
    return s;
}

static SbxSessionRecord session(const char *id, const char *tenant_id, gint64 created_at_ms)
{
    return (SbxSessionRecord){
        .id = (char *)id,
        .tenant_id = (char *)tenant_id,
        .profile = "q35-serial",
        .memory_mib = 256,
        .created_at_ms = created_at_ms,
        .idle_timeout_ms = 600000,
        .max_lifetime_ms = 3600000,
    };
}

static void begin_ok(SbxStore *s, const char *id, const char *tenant_id, gint64 created_at_ms)
{
    g_autoptr(GError) error = NULL;
    SbxSessionRecord rec = session(id, tenant_id, created_at_ms);
    if (!sbx_session_records_begin(s, &rec, &error)) {
        fail_msg("begin session %s: %s", id, error->message);
    }
}

static void end_ok(SbxStore *s, const char *id, const char *status, const char *reason)
{
    g_autoptr(GError) error = NULL;
    if (!sbx_session_records_end(s, id, status, reason, 0, &error)) {
        fail_msg("end session %s: %s", id, error->message);
    }
}

static SbxSessionRecord *get_ok(SbxStore *s, const char *tenant_id, const char *id)
{
    g_autoptr(GError) error = NULL;
    SbxSessionRecord *r = NULL;
    if (!sbx_session_records_get(s, tenant_id, id, &r, &error)) {
        fail_msg("get session %s: %s", id, error->message);
    }
    return r;
}

/* An execution record of session @session_id (NULL: none), finished "ok" unless @running. */
static void add_execution(SbxStore *s, const char *id, const char *session_id, gint64 created,
                          gboolean running)
{
    g_autoptr(GError) error = NULL;
    SbxRecord r = store_fixture_record(id, NULL, created);

    r.session_id = (char *)session_id;
    if (!sbx_records_begin(s, &r, &error)) {
        fail_msg("begin %s: %s", id, error->message);
    }
    r.status = "ok";
    if (!running && !sbx_records_finish(s, &r, NULL, 0, NULL, 0, &error)) {
        fail_msg("finish %s: %s", id, error->message);
    }
}

/* How many sessions the store has (up to a page's maximum). */
static guint count_all(SbxStore *s)
{
    g_autoptr(GPtrArray) all = NULL;
    SbxSessionFilter f = {.limit = SBX_RECORDS_LIST_MAX};
    assert_true(sbx_session_records_list(s, &f, &all, NULL));
    return all->len;
}

static void test_begin_end(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    gint64 before = sbx_store_now_ms();

    begin_ok(s, "sbx-1", TENANT_A, 0);
    g_autoptr(SbxSessionRecord) open = get_ok(s, NULL, "sbx-1");
    assert_string_equal(open->status, SBX_SESSION_STATUS_OPEN);
    assert_string_equal(open->tenant_id, TENANT_A);
    assert_string_equal(open->profile, "q35-serial");
    assert_int_equal(open->memory_mib, 256);
    assert_true(open->created_at_ms >= before); /* 0: now */
    assert_int_equal(open->idle_timeout_ms, 600000);
    assert_int_equal(open->max_lifetime_ms, 3600000);
    assert_null(open->reason);
    assert_int_equal(open->ended_at_ms, 0);
    assert_int_equal(open->executions, 0);

    g_autoptr(GError) error = NULL;
    assert_true(sbx_session_records_end(s, "sbx-1", "expired", "idle for 600 s", 5000, &error));
    g_autoptr(SbxSessionRecord) ended = get_ok(s, NULL, "sbx-1");
    assert_string_equal(ended->status, "expired");
    assert_string_equal(ended->reason, "idle for 600 s");
    assert_int_equal(ended->ended_at_ms, 5000);

    /* A second end is refused and changes nothing: the first stays. */
    assert_false(sbx_session_records_end(s, "sbx-1", "deleted", "again", 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS));
    assert_non_null(strstr(error->message, "expired"));
    g_clear_error(&error);
    g_autoptr(SbxSessionRecord) still = get_ok(s, NULL, "sbx-1");
    assert_string_equal(still->status, "expired");
    assert_string_equal(still->reason, "idle for 600 s");
    assert_false(sbx_session_records_end(s, "nope", "ended", NULL, 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    g_clear_error(&error);

    /* Every end status; a NULL reason; the time now when 0. */
    const char *ends[] = {"ended", "expired", "crashed", "interrupted", "deleted"};
    for (gsize i = 0; i < G_N_ELEMENTS(ends); i++) {
        g_autofree char *id = g_strdup_printf("e-%zu", i);
        begin_ok(s, id, NULL, 0);
        end_ok(s, id, ends[i], NULL);
        g_autoptr(SbxSessionRecord) r = get_ok(s, NULL, id);
        assert_string_equal(r->status, ends[i]);
        assert_null(r->reason);
        assert_null(r->tenant_id);
        assert_true(r->ended_at_ms >= before);
        assert_true(sbx_session_records_end_status_valid(ends[i]));
    }
}

static void test_invalid(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;
    g_autofree char *long_id = g_strnfill(65, 'a');
    SbxSessionRecord bad[] = {
        session("", NULL, 0),      session("a b", NULL, 0),   session(long_id, NULL, 0),
        session(NULL, NULL, 0),    session("ok-1", "t a", 0), session("ok-2", "x\xff", 0),
        session("ok-3", NULL, -1), session("ok-4", NULL, 0),  session("ok-5", NULL, 0),
        session("ok-6", NULL, 0),
    };
    bad[7].profile = "../q35";
    bad[8].profile = NULL;
    bad[9].idle_timeout_ms = -5;

    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        assert_false(sbx_session_records_begin(s, &bad[i], &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        g_clear_error(&error);
    }
    assert_int_equal(count_all(s), 0); /* nothing refused was written */
    begin_ok(s, "dup", NULL, 0);
    SbxSessionRecord dup = session("dup", NULL, 0);
    assert_false(sbx_session_records_begin(s, &dup, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS));
    g_clear_error(&error);
    const char *bad_ends[] = {NULL, "", "open", "running", "Ended"};
    for (gsize i = 0; i < G_N_ELEMENTS(bad_ends); i++) {
        assert_false(sbx_session_records_end(s, "dup", bad_ends[i], NULL, 0, &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        g_clear_error(&error);
        assert_false(sbx_session_records_end_status_valid(bad_ends[i]));
    }
    assert_false(sbx_session_records_end(s, "dup", "ended", NULL, -1, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
    g_clear_error(&error);
    g_autoptr(SbxSessionRecord) r = get_ok(s, NULL, "dup");
    assert_string_equal(r->status, "open"); /* no refused end changed it */
}

/* A reason is kept up to SBX_SESSION_REASON_MAX bytes, cut between characters, valid UTF-8. */
static void test_reason_bound(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    /* 1023 bytes of 'x' then "é" (2 bytes): the cut falls inside it, so 1023 are kept. */
    g_autofree char *x = g_strnfill(SBX_SESSION_REASON_MAX - 1, 'x');
    g_autofree char *split = g_strconcat(x, "\xc3\xa9 and more", NULL);
    g_autofree char *huge = g_strnfill(10 * 1024 * 1024, 'y');

    begin_ok(s, "r-1", NULL, 0);
    end_ok(s, "r-1", "crashed", split);
    g_autoptr(SbxSessionRecord) r1 = get_ok(s, NULL, "r-1");
    assert_string_equal(r1->reason, x);
    begin_ok(s, "r-2", NULL, 0);
    end_ok(s, "r-2", "crashed", huge);
    g_autoptr(SbxSessionRecord) r2 = get_ok(s, NULL, "r-2");
    assert_int_equal(strlen(r2->reason), SBX_SESSION_REASON_MAX);
    begin_ok(s, "r-3", NULL, 0);
    end_ok(s, "r-3", "crashed", "QEMU said \xff\xfe\x01 and died");
    g_autoptr(SbxSessionRecord) r3 = get_ok(s, NULL, "r-3");
    assert_true(g_utf8_validate(r3->reason, -1, NULL));
    assert_string_equal(r3->reason, "QEMU said \xef\xbf\xbd\xef\xbf\xbd\x01 and died");
    /* Exactly at the bound: whole. */
    g_autofree char *exact = g_strnfill(SBX_SESSION_REASON_MAX, 'z');
    begin_ok(s, "r-4", NULL, 0);
    end_ok(s, "r-4", "ended", exact);
    g_autoptr(SbxSessionRecord) r4 = get_ok(s, NULL, "r-4");
    assert_string_equal(r4->reason, exact);
}

static void test_other_tenant_not_found(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;
    SbxSessionRecord *got = NULL;

    begin_ok(s, "mine", TENANT_A, 0);
    assert_false(sbx_session_records_get(s, TENANT_B, "mine", &got, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    assert_null(got);
    g_autoptr(SbxSessionRecord) own = get_ok(s, TENANT_A, "mine");
    g_autoptr(SbxSessionRecord) any = get_ok(s, NULL, "mine");
    assert_string_equal(own->id, "mine");
    assert_string_equal(any->tenant_id, TENANT_A);
}

/* Every page of @f (limit 4) through the cursor: the ids in order. */
static GPtrArray *all_pages(SbxStore *s, SbxSessionFilter f)
{
    GPtrArray *ids = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *cursor = NULL;

    f.limit = 4;
    for (;;) {
        g_autoptr(GPtrArray) page = NULL;
        f.cursor_id = cursor;
        assert_true(sbx_session_records_list(s, &f, &page, NULL));
        for (guint i = 0; i < page->len; i++) {
            g_ptr_array_add(ids, g_strdup(((SbxSessionRecord *)page->pdata[i])->id));
        }
        if (page->len < f.limit) {
            return ids;
        }
        const SbxSessionRecord *last = page->pdata[page->len - 1];
        g_free(cursor);
        cursor = g_strdup(last->id);
        f.cursor_created_ms = last->created_at_ms;
    }
}

static void test_list_paging(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);

    /* 13 sessions, two to a millisecond (the id breaks ties); odd ones tenant a's, every
     * third ended. */
    for (int i = 0; i < 13; i++) {
        g_autofree char *id = g_strdup_printf("s%02d", i);
        begin_ok(s, id, i % 2 ? TENANT_A : NULL, 1000 + i / 2);
        if (i % 3 == 0) {
            end_ok(s, id, "ended", "closed by its tenant");
        }
    }
    g_autoptr(GPtrArray) all = all_pages(s, (SbxSessionFilter){0});
    assert_int_equal(all->len, 13);
    for (guint i = 0; i < 13; i++) { /* newest first */
        g_autofree char *want = g_strdup_printf("s%02u", 12 - i);
        assert_string_equal(all->pdata[i], want);
    }
    g_autoptr(GPtrArray) mine = all_pages(s, (SbxSessionFilter){.tenant_id = TENANT_A});
    assert_int_equal(mine->len, 6);
    assert_string_equal(mine->pdata[0], "s11");
    g_autoptr(GPtrArray) ended = all_pages(s, (SbxSessionFilter){.status = "ended"});
    assert_int_equal(ended->len, 5); /* 0, 3, 6, 9, 12 */
    g_autoptr(GPtrArray) none = all_pages(s, (SbxSessionFilter){.tenant_id = TENANT_B});
    assert_int_equal(none->len, 0);
    g_autoptr(GPtrArray) page = NULL;
    assert_true(sbx_session_records_list(s, NULL, &page, NULL));
    assert_int_equal(page->len, 13);
}

/* Executions name their session: the filter, the count, oldest first, the JSON. */
static void test_executions_of_session(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;

    begin_ok(s, "nb-1", NULL, 1000);
    begin_ok(s, "nb-2", NULL, 1000);
    for (int i = 0; i < 9; i++) { /* three to a millisecond */
        g_autofree char *id = g_strdup_printf("x%d", i);
        add_execution(s, id, "nb-1", 2000 + i / 3, i == 8);
    }
    add_execution(s, "y0", "nb-2", 2000, FALSE);
    add_execution(s, "z0", NULL, 2000, FALSE);
    SbxRecord bad = store_fixture_record("bad-1", NULL, 0);
    bad.session_id = "no such/id";
    assert_false(sbx_records_begin(s, &bad, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));

    g_autoptr(SbxSessionRecord) nb1 = get_ok(s, NULL, "nb-1");
    assert_int_equal(nb1->executions, 9);
    g_autoptr(SbxRecord) x0 = NULL;
    assert_true(sbx_records_get(s, NULL, "x0", &x0, NULL));
    assert_string_equal(x0->session_id, "nb-1");
    g_autofree char *json = sbx_record_to_json(x0);
    assert_non_null(strstr(json, "\"session_id\":\"nb-1\""));

    /* Newest first (the default), then oldest first, both in pages of 4 through the cursor. */
    for (int oldest = 0; oldest < 2; oldest++) {
        g_autoptr(GPtrArray) ids = g_ptr_array_new_with_free_func(g_free);
        SbxRecordFilter rf = {.session_id = "nb-1", .oldest_first = oldest, .limit = 4};
        g_autofree char *cursor = NULL;
        for (;;) {
            g_autoptr(GPtrArray) page = NULL;
            rf.cursor_id = cursor;
            assert_true(sbx_records_list(s, &rf, &page, NULL));
            for (guint i = 0; i < page->len; i++) {
                const SbxRecord *r = page->pdata[i];
                assert_string_equal(r->session_id, "nb-1");
                g_ptr_array_add(ids, g_strdup(r->id));
            }
            if (page->len < rf.limit) {
                break;
            }
            const SbxRecord *last = page->pdata[page->len - 1];
            g_free(cursor);
            cursor = g_strdup(last->id);
            rf.cursor_created_ms = last->created_at_ms;
        }
        assert_int_equal(ids->len, 9);
        for (guint i = 0; i < 9; i++) {
            g_autofree char *want = g_strdup_printf("x%u", oldest ? i : 8 - i);
            assert_string_equal(ids->pdata[i], want);
        }
    }
    /* With the other filters. */
    g_autoptr(GPtrArray) running = NULL;
    SbxRecordFilter rf = {.session_id = "nb-1", .status = "running"};
    assert_true(sbx_records_list(s, &rf, &running, NULL));
    assert_int_equal(running->len, 1);
    assert_string_equal(((SbxRecord *)running->pdata[0])->id, "x8");
    g_autoptr(GPtrArray) other = NULL;
    rf = (SbxRecordFilter){.session_id = "nb-2"};
    assert_true(sbx_records_list(s, &rf, &other, NULL));
    assert_int_equal(other->len, 1);
    g_autoptr(GPtrArray) everything = NULL;
    assert_true(sbx_records_list(s, NULL, &everything, NULL));
    assert_int_equal(everything->len, 11);
}

/* Sessions left open by a server are interrupted at the next server's open, not a client's. */
static void test_interrupted_at_open(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    gint64 before = sbx_store_now_ms();

    begin_ok(s, "open-1", TENANT_A, 0);
    begin_ok(s, "open-2", NULL, 0);
    begin_ok(s, "done-1", NULL, 0);
    end_ok(s, "done-1", "deleted", "deleted by its tenant");
    sbx_store_close(s);

    g_autoptr(GError) error = NULL;
    s = sbx_store_open_client(f->path, &error);
    assert_non_null(s);
    assert_int_equal(sbx_store_sessions_interrupted_at_open(s), 0);
    g_autoptr(SbxSessionRecord) still = get_ok(s, NULL, "open-1");
    assert_string_equal(still->status, "open");
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(sbx_store_sessions_interrupted_at_open(s), 2);
    assert_int_equal(sbx_store_interrupted_at_open(s), 0);
    const char *ids[] = {"open-1", "open-2"};
    for (gsize i = 0; i < G_N_ELEMENTS(ids); i++) {
        g_autoptr(SbxSessionRecord) r = get_ok(s, NULL, ids[i]);
        assert_string_equal(r->status, "interrupted");
        assert_non_null(r->reason);
        assert_true(r->ended_at_ms >= before);
    }
    g_autoptr(SbxSessionRecord) d = get_ok(s, NULL, "done-1");
    assert_string_equal(d->status, "deleted");
    assert_string_equal(d->reason, "deleted by its tenant");
    sbx_store_close(s);
    s = open_ok(f->path);
    assert_int_equal(sbx_store_sessions_interrupted_at_open(s), 0);
    sbx_store_close(s);
}

/* A server killed with -9 while a session and its execution run: both interrupted next open. */
static void test_killed_server(void **state)
{
    StoreFixture *f = *state;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        g_autoptr(GError) error = NULL;
        SbxStore *s = sbx_store_open(f->path, &error);
        SbxSessionRecord rec = session("killed-1", TENANT_A, 0);
        SbxRecord r = store_fixture_record("in-killed", TENANT_A, 0);
        r.session_id = "killed-1";
        if (s == NULL || !sbx_session_records_begin(s, &rec, &error) ||
            !sbx_records_begin(s, &r, &error)) {
            fprintf(stderr, "child: %s\n", error->message);
            _exit(3);
        }
        raise(SIGKILL);
        _exit(4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        fail_msg("the server was not killed: status 0x%x", status);
    }
    g_autoptr(SbxStore) s = open_ok(f->path); /* the dead server's lock went with it */
    assert_int_equal(sbx_store_sessions_interrupted_at_open(s), 1);
    assert_int_equal(sbx_store_interrupted_at_open(s), 1);
    g_autoptr(SbxSessionRecord) r = get_ok(s, TENANT_A, "killed-1");
    assert_string_equal(r->status, "interrupted");
    assert_int_equal(r->executions, 1);
    g_autoptr(SbxRecord) x = NULL;
    assert_true(sbx_records_get(s, NULL, "in-killed", &x, NULL));
    assert_string_equal(x->status, "interrupted");
}

static gboolean has_session(SbxStore *s, const char *id)
{
    g_autoptr(SbxSessionRecord) r = NULL;
    return sbx_session_records_get(s, NULL, id, &r, NULL);
}

/*
 * Retention: an open session is never deleted, however old; an ended one goes by age or count
 * once none of its executions is left, and with its last one.
 */
static void test_prune(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    gint64 now = sbx_store_now_ms(), day = 24 * 3600 * 1000ll;
    guint deleted = 0, sessions = 0;

    begin_ok(s, "old-open", NULL, now - 100 * day);
    add_execution(s, "in-old-open", "old-open", now - 100 * day, FALSE);
    begin_ok(s, "old-ended", NULL, now - 50 * day);
    end_ok(s, "old-ended", "expired", NULL);
    begin_ok(s, "old-with-new", NULL, now - 40 * day); /* its last execution is recent */
    end_ok(s, "old-with-new", "ended", NULL);
    add_execution(s, "old-exec", "old-with-new", now - 40 * day, FALSE);
    add_execution(s, "new-exec", "old-with-new", now - 5000, FALSE);
    begin_ok(s, "old-running", NULL, now - 40 * day); /* ended, an execution still running */
    end_ok(s, "old-running", "crashed", NULL);
    add_execution(s, "running-exec", "old-running", now - 40 * day, TRUE);
    for (int i = 0; i < 4; i++) {
        g_autofree char *id = g_strdup_printf("new-%d", i);
        begin_ok(s, id, NULL, now - 1000 + i);
        end_ok(s, id, "ended", NULL);
    }
    begin_ok(s, "new-open", NULL, now);

    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_age_s = 30 * 24 * 3600}, &deleted,
                                  &sessions, NULL, NULL));
    assert_int_equal(deleted, 2); /* in-old-open, old-exec */
    assert_int_equal(sessions, 1);
    assert_false(has_session(s, "old-ended"));
    assert_true(has_session(s, "old-open"));     /* open: never */
    assert_true(has_session(s, "old-with-new")); /* new-exec is left */
    assert_true(has_session(s, "old-running"));  /* running-exec is never pruned */
    g_autoptr(SbxSessionRecord) kept = get_ok(s, NULL, "old-with-new");
    assert_int_equal(kept->executions, 1);

    /* By count: the newest 2 ended sessions stay, and those executions still name. */
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_count = 2}, &deleted, &sessions, NULL, NULL));
    assert_int_equal(deleted, 0);  /* new-exec is among the newest 2 finished */
    assert_int_equal(sessions, 2); /* new-0, new-1 */
    assert_false(has_session(s, "new-0"));
    assert_false(has_session(s, "new-1"));
    assert_true(has_session(s, "new-2") && has_session(s, "new-3"));
    assert_true(has_session(s, "old-with-new") && has_session(s, "old-running"));
    assert_true(has_session(s, "old-open") && has_session(s, "new-open"));
    assert_int_equal(count_all(s), 6);

    /* The session goes with its last execution record. */
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_count = 1}, &deleted, &sessions, NULL, NULL));
    assert_int_equal(deleted, 0);  /* one finished record left: new-exec */
    assert_int_equal(sessions, 1); /* new-2; old-with-new is past the count, new-exec names it */
    assert_false(has_session(s, "new-2"));
    assert_true(has_session(s, "old-with-new"));
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_age_s = 1}, &deleted, &sessions, NULL, NULL));
    assert_int_equal(deleted, 1); /* new-exec, 5 s old */
    assert_false(has_session(s, "old-with-new"));
    assert_true(has_session(s, "old-open") && has_session(s, "new-open"));
    assert_true(has_session(s, "old-running")); /* its running execution */
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){0}, NULL, NULL, NULL,
                                  NULL)); /* no bound: nothing */
}

/*
 * Retention by bytes and sessions: the bound deletes execution records only, never a running
 * one; a session whose executions it deleted still goes by the rules of age and count alone (in
 * the same prune), never while open.
 */
static void test_prune_bytes(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    gint64 now = sbx_store_now_ms(), day = 24 * 3600 * 1000ll;
    guint deleted = 0, sessions = 0;

    begin_ok(s, "s-old", NULL, now - 40 * day); /* ended, past 30 days; its executions recent */
    end_ok(s, "s-old", "ended", NULL);
    add_execution(s, "x-old-1", "s-old", now - 9000, FALSE);
    add_execution(s, "x-old-2", "s-old", now - 8000, FALSE);
    begin_ok(s, "s-new", NULL, now - 7000); /* ended, recent */
    end_ok(s, "s-new", "ended", NULL);
    add_execution(s, "x-new", "s-new", now - 6000, FALSE);
    begin_ok(s, "s-open", NULL, now - 50 * day); /* open, old */
    add_execution(s, "x-open-done", "s-open", now - 5000, FALSE);
    add_execution(s, "x-open-running", "s-open", now - 4000, TRUE);

    /* Bytes alone: every finished execution goes (1 byte holds none), no session. */
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_bytes = 1}, &deleted, &sessions, NULL, NULL));
    assert_int_equal(deleted, 4);
    assert_int_equal(sessions, 0);
    assert_true(has_session(s, "s-old") && has_session(s, "s-new") && has_session(s, "s-open"));
    g_autoptr(SbxSessionRecord) open = get_ok(s, NULL, "s-open");
    assert_int_equal(open->executions, 1); /* the running one */

    /* Age with bytes, in one prune: s-old (past the age, none of its executions left) goes. */
    add_execution(s, "x-new-2", "s-new", now - 3000, FALSE);
    assert_true(sbx_records_prune(s,
                                  &(SbxRecordsPrune){.max_age_s = 30 * 24 * 3600, .max_bytes = 1},
                                  &deleted, &sessions, NULL, NULL));
    assert_int_equal(deleted, 1); /* x-new-2 by bytes */
    assert_int_equal(sessions, 1);
    assert_false(has_session(s, "s-old"));
    assert_true(has_session(s, "s-new"));  /* recent, and no count */
    assert_true(has_session(s, "s-open")); /* open: never, however old */

    /* Count with bytes: s-new is the newest ended one, kept; s-open stays open. */
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_count = 1, .max_bytes = 1}, &deleted,
                                  &sessions, NULL, NULL));
    assert_int_equal(deleted, 0);
    assert_int_equal(sessions, 0);
    assert_true(has_session(s, "s-new") && has_session(s, "s-open"));
    assert_int_equal(count_all(s), 2);
}

static void test_json(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);

    begin_ok(s, "j-1", TENANT_A, 1234);
    add_execution(s, "jx-1", "j-1", 1300, FALSE);
    end_ok(s, "j-1", "crashed", "QEMU \"died\"\n\x1b[2J");
    g_autoptr(SbxSessionRecord) r = get_ok(s, NULL, "j-1");
    g_autofree char *text = sbx_session_record_to_json(r);
    cJSON *v = cJSON_Parse(text);
    if (v == NULL) {
        fail_msg("not JSON: %s", text);
    }
    assert_string_equal(cJSON_GetObjectItem(v, "id")->valuestring, "j-1");
    assert_string_equal(cJSON_GetObjectItem(v, "tenant_id")->valuestring, TENANT_A);
    assert_string_equal(cJSON_GetObjectItem(v, "status")->valuestring, "crashed");
    assert_string_equal(cJSON_GetObjectItem(v, "reason")->valuestring, "QEMU \"died\"\n\x1b[2J");
    assert_int_equal(cJSON_GetObjectItem(v, "created_at")->valuedouble, 1234);
    assert_int_equal(cJSON_GetObjectItem(v, "memory_mib")->valuedouble, 256);
    assert_int_equal(cJSON_GetObjectItem(v, "idle_timeout_ms")->valuedouble, 600000);
    assert_int_equal(cJSON_GetObjectItem(v, "max_lifetime_ms")->valuedouble, 3600000);
    assert_int_equal(cJSON_GetObjectItem(v, "executions")->valuedouble, 1);
    assert_true(cJSON_GetObjectItem(v, "ended_at")->valuedouble > 0);
    cJSON_Delete(v);
    begin_ok(s, "j-2", NULL, 0);
    g_autoptr(SbxSessionRecord) open = get_ok(s, NULL, "j-2");
    g_autofree char *open_text = sbx_session_record_to_json(open);
    cJSON *w = cJSON_Parse(open_text);
    assert_non_null(w);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(w, "tenant_id")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(w, "reason")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(w, "ended_at")));
    cJSON_Delete(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, store_fixture_setup, store_fixture_teardown)
        T(test_begin_end),
        T(test_invalid),
        T(test_reason_bound),
        T(test_other_tenant_not_found),
        T(test_list_paging),
        T(test_executions_of_session),
        T(test_interrupted_at_open),
        T(test_killed_server),
        T(test_prune),
        T(test_prune_bytes),
        T(test_json),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
