/*
 * The files of an execution (exec-files.h): the puts and the first listing before the execute,
 * the second listing and the reads of what changed after the done, each one file operation of
 * session/files.h at a time.
 */
#include "exec/exec-files.h"

#include <string.h>

#include "base/json-builder.h"
#include "protocol/limits.h"

struct SbxExecFiles {
    SbxExecFileIn *in;
    gsize n_in;
    /* the stage in progress */
    SbxSession *session; /* borrowed; NULL when no stage runs */
    SbxExecFilesFunc done;
    gpointer data;
    guint next;          /* the next file in (staging) or changed entry (collecting) */
    guint report_source; /* the stage's start or end, from the loop */
    guint deadline;      /* SBX_EXEC_FILES_STAGE_TIMEOUT_MS */
    GError *error;
    /* the staging's listing: path -> its entry, to compare with */
    GHashTable *before;
    gboolean before_truncated;
    /* the collection */
    SbxFileEntry *changed; /* the entries to read, in the listing's order (copied) */
    gsize n_changed;
    GArray *out; /* SbxExecFileOut */
    gboolean truncated;
    guint64 content_left; /* of SBX_EXEC_FILES_CONTENT_MAX */
    guint64 read_left;    /* of SBX_EXEC_FILES_READ_MAX */
};

/* ---- the end of a stage ------------------------------------------------------------------- */

static gboolean report(gpointer data)
{
    SbxExecFiles *f = data;
    g_autoptr(GError) error = g_steal_pointer(&f->error);

    f->report_source = 0;
    f->session = NULL;
    g_clear_handle_id(&f->deadline, g_source_remove);
    f->done(f, error, f->data);
    return G_SOURCE_REMOVE;
}

/* End the stage with @error (taken; NULL: done), from the loop: never inside the call that
 * started it. */
static void end_stage(SbxExecFiles *f, GError *error)
{
    f->error = error;
    f->report_source = g_idle_add(report, f);
}

static void end_with(SbxExecFiles *f, const char *what, const GError *error)
{
    end_stage(f, g_error_new(error->domain, error->code, "%s: %s", what, error->message));
}

/* ---- staging ------------------------------------------------------------------------------ */

static void entry_free(gpointer p)
{
    SbxFileEntry *e = p;

    g_free(e->path);
    g_free(e);
}

static void on_listed_before(SbxSession *s, const SbxFileOutcome *out, const GError *error,
                             gpointer data)
{
    SbxExecFiles *f = data;
    (void)s;

    if (error != NULL) {
        end_with(f, "cannot list the workspace", error);
        return;
    }
    for (gsize i = 0; i < out->n_entries; i++) {
        SbxFileEntry *e = g_new(SbxFileEntry, 1);
        *e = out->entries[i];
        e->path = g_strdup(out->entries[i].path);
        g_hash_table_replace(f->before, e->path, e);
    }
    f->before_truncated = out->truncated;
    end_stage(f, NULL);
}

static void put_next(SbxExecFiles *f);

static void on_put(SbxSession *s, const SbxFileOutcome *out, const GError *error, gpointer data)
{
    SbxExecFiles *f = data;
    (void)s;
    (void)out;

    if (error != NULL) {
        g_autofree char *what = g_strdup_printf("cannot put %s", f->in[f->next].path);
        end_with(f, what, error);
        return;
    }
    f->next++;
    put_next(f);
}

static void put_next(SbxExecFiles *f)
{
    g_autoptr(GError) error = NULL;
    gboolean started;

    if (f->next < f->n_in) {
        started = sbx_session_file_put_async(f->session, f->in[f->next].path, f->in[f->next].bytes,
                                             on_put, f, &error);
    } else {
        started = sbx_session_file_list_async(f->session, NULL, on_listed_before, f, &error);
    }
    if (!started) {
        end_with(f, "cannot stage the files", error);
    }
}

static void on_hello(SbxSession *s, const GError *error, gpointer data)
{
    SbxExecFiles *f = data;
    (void)s;

    if (error != NULL) {
        end_with(f, "the guest agent did not say hello", error);
        return;
    }
    put_next(f);
}

static gboolean stage_later(gpointer data)
{
    SbxExecFiles *f = data;
    g_autoptr(GError) error = NULL;

    f->report_source = 0;
    if (sbx_session_is_ready(f->session)) {
        put_next(f); /* a pooled VM, a session's: the hello was done ahead */
    } else if (!sbx_session_handshake_async(f->session, FALSE, on_hello, f, &error)) {
        end_with(f, "cannot say hello to the guest agent", error);
    }
    return G_SOURCE_REMOVE;
}

/* ---- collecting --------------------------------------------------------------------------- */

static void out_clear(gpointer p)
{
    SbxExecFileOut *o = p;

    g_free(o->path);
    if (o->content != NULL) {
        g_bytes_unref(o->content);
    }
    g_free(o->omitted);
}

/* Whether @e (a regular file of the second listing) is new or changed since the first. */
static gboolean changed(const SbxExecFiles *f, const SbxFileEntry *e)
{
    const SbxFileEntry *old = g_hash_table_lookup(f->before, e->path);

    return old == NULL || old->type != e->type || old->size != e->size ||
           old->mtime_us != e->mtime_us;
}

static SbxExecFileOut *out_add(SbxExecFiles *f, const SbxFileEntry *e)
{
    SbxExecFileOut o = {.path = g_strdup(e->path), .size = e->size};

    g_array_append_val(f->out, o);
    return &g_array_index(f->out, SbxExecFileOut, f->out->len - 1);
}

static void read_next(SbxExecFiles *f);

static void on_read(SbxSession *s, const SbxFileOutcome *out, const GError *error, gpointer data)
{
    SbxExecFiles *f = data;
    SbxExecFileOut *o = &g_array_index(f->out, SbxExecFileOut, f->out->len - 1);
    (void)s;

    if (error != NULL) {
        if (!sbx_session_is_ready(s)) {
            end_with(f, "cannot collect the files", error); /* the session broke */
            return;
        }
        /* that file only: gone, grown past the cap, refused (a symbolic link planted) */
        o->omitted = g_strdup_printf("not read: %s", error->message);
    } else {
        o->size = out->size;
        g_strlcpy(o->sha256, out->sha256, sizeof(o->sha256));
        f->read_left -= MIN(f->read_left, out->size);
        if (out->data != NULL) {
            o->content = g_bytes_ref(out->data);
            f->content_left -= MIN(f->content_left, out->size);
        } else {
            o->omitted = g_strdup_printf("contents: past the %u MiB returned over all files",
                                         SBX_EXEC_FILES_CONTENT_MAX >> 20);
        }
    }
    f->next++;
    read_next(f);
}

/* A chunk of a file digested but not kept: the session's SHA-256 is all that is wanted. */
static gboolean drop_chunk(const guint8 *data, gsize len, gpointer user_data, GError **error)
{
    (void)data;
    (void)len;
    (void)user_data;
    (void)error;
    return TRUE;
}

static void read_next(SbxExecFiles *f)
{
    g_autoptr(GError) error = NULL;

    for (; f->next < f->n_changed; f->next++) {
        const SbxFileEntry *e = &f->changed[f->next];
        SbxExecFileOut *o = out_add(f, e);
        if (e->size > f->read_left) {
            o->omitted = g_strdup_printf("not read: past the %u MiB read over all files",
                                         SBX_EXEC_FILES_READ_MAX >> 20);
            continue;
        }
        /* kept whole when it fits what is left of the contents, else only digested */
        gboolean keep = e->size <= f->content_left;
        guint64 cap = keep ? f->content_left : f->read_left;
        if (sbx_session_file_get_async(f->session, e->path, MAX(cap, 1), keep ? NULL : drop_chunk,
                                       on_read, f, &error)) {
            return;
        }
        end_with(f, "cannot collect the files", error);
        return;
    }
    end_stage(f, NULL);
}

static void on_listed_after(SbxSession *s, const SbxFileOutcome *out, const GError *error,
                            gpointer data)
{
    SbxExecFiles *f = data;
    (void)s;

    if (error != NULL) {
        end_with(f, "cannot list the workspace", error);
        return;
    }
    /* Either listing cut short: a file beyond it may have changed unseen. */
    f->truncated = out->truncated || f->before_truncated;
    f->changed = g_new0(SbxFileEntry, MIN(out->n_entries, SBX_EXEC_FILES_OUT_MAX) + 1);
    for (gsize i = 0; i < out->n_entries; i++) {
        const SbxFileEntry *e = &out->entries[i];
        if (e->type != SBX_FILE_TYPE_FILE || !changed(f, e)) {
            continue;
        }
        if (f->n_changed == SBX_EXEC_FILES_OUT_MAX) {
            f->truncated = TRUE;
            break;
        }
        f->changed[f->n_changed] = *e;
        f->changed[f->n_changed].path = g_strdup(e->path);
        f->n_changed++;
    }
    read_next(f);
}

static gboolean collect_later(gpointer data)
{
    SbxExecFiles *f = data;
    g_autoptr(GError) error = NULL;

    f->report_source = 0;
    if (!sbx_session_file_list_async(f->session, NULL, on_listed_after, f, &error)) {
        end_with(f, "cannot list the workspace", error);
    }
    return G_SOURCE_REMOVE;
}

/* ---- the API ------------------------------------------------------------------------------ */

SbxExecFiles *sbx_exec_files_new(const SbxExecFileIn *in, gsize n_in)
{
    SbxExecFiles *f = g_new0(SbxExecFiles, 1);

    g_assert(n_in <= SBX_EXEC_FILES_IN_MAX);
    f->in = g_new0(SbxExecFileIn, n_in + 1);
    for (gsize i = 0; i < n_in; i++) {
        g_assert(sbx_workspace_path_valid(in[i].path)); /* the front end checked it */
        f->in[i].path = g_strdup(in[i].path);
        f->in[i].bytes = g_bytes_ref(in[i].bytes);
    }
    f->n_in = n_in;
    f->before = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, entry_free);
    f->out = g_array_new(FALSE, TRUE, sizeof(SbxExecFileOut));
    g_array_set_clear_func(f->out, out_clear);
    f->content_left = SBX_EXEC_FILES_CONTENT_MAX;
    f->read_left = SBX_EXEC_FILES_READ_MAX;
    return f;
}

static gboolean too_long(gpointer data)
{
    SbxExecFiles *f = data;
    SbxSession *session = f->session;

    f->deadline = 0;
    sbx_exec_files_cancel(f);
    f->session = session;
    end_stage(f,
              g_error_new(G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "the files took more than %u s to move",
                          SBX_EXEC_FILES_STAGE_TIMEOUT_MS / 1000));
    return G_SOURCE_REMOVE;
}

static void begin(SbxExecFiles *f, SbxSession *session, SbxExecFilesFunc done, gpointer data,
                  GSourceFunc first)
{
    g_assert(f->session == NULL && f->report_source == 0);
    f->session = session;
    f->done = done;
    f->data = data;
    f->next = 0;
    /* from the loop: done never runs inside this call, whatever fails first */
    f->report_source = g_idle_add(first, f);
    f->deadline = g_timeout_add(SBX_EXEC_FILES_STAGE_TIMEOUT_MS, too_long, f);
}

void sbx_exec_files_stage(SbxExecFiles *files, SbxSession *session, SbxExecFilesFunc done,
                          gpointer data)
{
    begin(files, session, done, data, stage_later);
}

void sbx_exec_files_collect(SbxExecFiles *files, SbxSession *session, SbxExecFilesFunc done,
                            gpointer data)
{
    begin(files, session, done, data, collect_later);
}

gboolean sbx_exec_files_cancel(SbxExecFiles *files)
{
    gboolean usable = TRUE;

    if (files->session == NULL) {
        return TRUE;
    }
    if (files->report_source == 0) {
        usable = sbx_session_file_cancel(files->session); /* an operation in flight */
    }
    g_clear_handle_id(&files->report_source, g_source_remove);
    g_clear_handle_id(&files->deadline, g_source_remove);
    g_clear_error(&files->error);
    files->session = NULL;
    return usable;
}

const SbxExecFileOut *sbx_exec_files_out(const SbxExecFiles *files, gsize *n, gboolean *truncated)
{
    *n = files->out->len;
    *truncated = files->truncated;
    return (const SbxExecFileOut *)(gpointer)files->out->data;
}

char *sbx_exec_files_json(const SbxExecFiles *files, const char *why, gboolean with_content)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "changed");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; i < files->out->len; i++) {
        const SbxExecFileOut *o = &g_array_index(files->out, SbxExecFileOut, i);
        sbx_jsonb_begin_object(&b);
        sbx_jsonb_member_string(&b, "path", o->path);
        sbx_jsonb_member_uint(&b, "size", o->size);
        sbx_jsonb_member_string(&b, "sha256", o->sha256[0] != '\0' ? o->sha256 : NULL);
        if (with_content && o->content != NULL) {
            g_autofree char *b64 =
                g_base64_encode(g_bytes_get_data(o->content, NULL), g_bytes_get_size(o->content));
            sbx_jsonb_member_string(&b, "content_base64", b64);
        }
        if (o->omitted != NULL) {
            sbx_jsonb_member_string(&b, "omitted", o->omitted);
        }
        sbx_jsonb_end_object(&b);
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_member_bool(&b, "truncated", files->truncated);
    sbx_jsonb_member_string(&b, "error", why);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

void sbx_exec_files_free(SbxExecFiles *files)
{
    if (files == NULL) {
        return;
    }
    sbx_exec_files_cancel(files);
    for (gsize i = 0; i < files->n_in; i++) {
        g_free(files->in[i].path);
        g_bytes_unref(files->in[i].bytes);
    }
    g_free(files->in);
    for (gsize i = 0; i < files->n_changed; i++) {
        g_free(files->changed[i].path);
    }
    g_free(files->changed);
    g_hash_table_destroy(files->before);
    g_array_unref(files->out);
    g_free(files);
}
