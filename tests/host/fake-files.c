/*
 * The fake guest's workspace: `file` requests served from memory, honestly or, by its knobs,
 * not (see FakeFiles in fake-guest.h).
 */
#include <poll.h>
#include <string.h>

#include "fake-guest.h"

/* The modification time every entry reports (the host passes it through). */
#define FAKE_MTIME_US 1700000000000000ll

static void array_free(gpointer p)
{
    g_byte_array_unref(p);
}

FakeFiles *fake_files_new(void)
{
    FakeFiles *f = g_new0(FakeFiles, 1);

    g_mutex_init(&f->lock);
    f->files = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, array_free);
    f->writes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, array_free);
    return f;
}

void fake_files_free(FakeFiles *f)
{
    if (f == NULL) {
        return;
    }
    g_hash_table_destroy(f->files);
    g_hash_table_destroy(f->writes);
    g_free(f->fail_message);
    g_mutex_clear(&f->lock);
    g_free(f);
}

void fake_files_set(FakeFiles *f, const char *path, const void *data, gsize len)
{
    GByteArray *a = g_byte_array_sized_new(len);

    g_byte_array_append(a, data, len);
    g_mutex_lock(&f->lock);
    g_hash_table_insert(f->files, g_strdup(path), a);
    g_mutex_unlock(&f->lock);
}

GBytes *fake_files_get(FakeFiles *f, const char *path)
{
    g_mutex_lock(&f->lock);
    GByteArray *a = g_hash_table_lookup(f->files, path);
    GBytes *b = a != NULL ? g_bytes_new(a->data, a->len) : NULL;
    g_mutex_unlock(&f->lock);
    return b;
}

guint fake_files_count(FakeFiles *f, SbxFileOp op)
{
    g_mutex_lock(&f->lock);
    guint n = f->ops[op];
    g_mutex_unlock(&f->lock);
    return n;
}

void fake_files_fail(FakeFiles *f, guint after, const char *type, const char *message)
{
    g_mutex_lock(&f->lock);
    f->fail_type = type;
    g_free(f->fail_message);
    f->fail_message = g_strdup(message != NULL ? message : "fake failure");
    f->fail_countdown = after + 1;
    g_mutex_unlock(&f->lock);
}

/* ---- the workspace -------------------------------------------------------------------------- */

/* @path (NULL: the root) is under @dir: "a/b" is under "a", everything under the root. */
static gboolean under(const char *path, const char *dir)
{
    size_t n = dir != NULL ? strlen(dir) : 0;
    return dir == NULL || (strncmp(path, dir, n) == 0 && path[n] == '/');
}

static gboolean is_dir(FakeFiles *f, const char *path)
{
    GHashTableIter it;
    gpointer key;

    if (path == NULL) {
        return TRUE;
    }
    g_hash_table_iter_init(&it, f->files);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        if (under(key, path)) {
            return TRUE;
        }
    }
    return FALSE;
}

/* A parent of @path is a regular file. */
static gboolean parent_is_file(FakeFiles *f, const char *path)
{
    g_autofree char *p = g_strdup(path);

    for (char *slash = strrchr(p, '/'); slash != NULL; slash = strrchr(p, '/')) {
        *slash = '\0';
        if (g_hash_table_contains(f->files, p)) {
            return TRUE;
        }
    }
    return FALSE;
}

/* What an answer says; errno names NULL when ok. */
typedef struct {
    const char *type; /* errno name of a refusal */
    guint64 size;
    const guint8 *data;
    gsize len;
    GArray *entries; /* SbxFileEntry (paths owned) */
    gboolean truncated;
    guint8 *owned; /* data to free */
} Answer;

static void answer_write(FakeFiles *f, const SbxFile *m, Answer *a)
{
    GByteArray *tmp = g_hash_table_lookup(f->writes, m->path);

    if (m->offset == 0) {
        tmp = g_byte_array_new();
        g_hash_table_insert(f->writes, g_strdup(m->path), tmp);
    } else if (tmp == NULL || tmp->len != m->offset) {
        g_hash_table_remove(f->writes, m->path);
        a->type = "EINVAL";
        return;
    }
    g_byte_array_append(tmp, m->data, m->len);
    f->write_max = MAX(f->write_max, m->len);
    a->size = tmp->len;
    if (!m->last) {
        return;
    }
    if (is_dir(f, m->path)) {
        a->type = "EISDIR";
    } else if (parent_is_file(f, m->path)) {
        a->type = "ENOTDIR";
    } else {
        g_hash_table_insert(f->files, g_strdup(m->path), g_byte_array_ref(tmp));
    }
    g_hash_table_remove(f->writes, m->path);
}

static void answer_read(FakeFiles *f, const SbxFile *m, Answer *a)
{
    GByteArray *file = g_hash_table_lookup(f->files, m->path);

    if (file == NULL) {
        a->type = is_dir(f, m->path) ? "EISDIR" : "ENOENT";
        return;
    }
    a->size = file->len;
    if (m->offset < file->len) {
        a->len = MIN(m->length, file->len - m->offset);
    }
    a->owned = g_malloc0(a->len + f->read_extra + 1);
    if (a->len > 0) {
        memcpy(a->owned, file->data + m->offset, a->len);
    }
    a->len += f->read_extra;
    a->data = a->owned;
    for (gsize i = 0; i < f->grow_per_read; i++) {
        g_byte_array_append(file, (const guint8 *)"g", 1);
    }
}

/* Add an entry unless the answer is full (then it says truncated). */
static void add_entry(Answer *a, const char *path, SbxFileType type, guint64 size)
{
    SbxFileEntry e = {.path = g_strdup(path), .type = type, .size = size};

    if (a->entries->len >= SBX_FILE_LIST_MAX) {
        g_free(e.path);
        a->truncated = TRUE;
        return;
    }
    e.mtime_us = FAKE_MTIME_US;
    g_array_append_val(a->entries, e);
}

static void answer_list(FakeFiles *f, const SbxFile *m, Answer *a)
{
    g_autoptr(GHashTable) dirs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GList) keys = NULL;

    if (m->path != NULL && g_hash_table_contains(f->files, m->path)) {
        a->type = "ENOTDIR";
        return;
    }
    if (!is_dir(f, m->path)) {
        a->type = "ENOENT";
        return;
    }
    keys = g_list_sort(g_hash_table_get_keys(f->files), (GCompareFunc)strcmp);
    a->entries = g_array_new(FALSE, FALSE, sizeof(SbxFileEntry));
    for (GList *k = keys; k != NULL; k = k->next) {
        const char *path = k->data;
        if (!under(path, m->path)) {
            continue;
        }
        /* the directories on the way, once each, before their contents */
        for (const char *s = strchr(path + (m->path != NULL ? strlen(m->path) + 1 : 0), '/');
             s != NULL; s = strchr(s + 1, '/')) {
            g_autofree char *dir = g_strndup(path, s - path);
            if (!g_hash_table_contains(dirs, dir)) {
                g_hash_table_add(dirs, g_strdup(dir));
                add_entry(a, dir, SBX_FILE_TYPE_DIR, 0);
            }
        }
        GByteArray *b = g_hash_table_lookup(f->files, path);
        add_entry(a, path, SBX_FILE_TYPE_FILE, b->len);
    }
}

static void answer_delete(FakeFiles *f, const SbxFile *m, Answer *a)
{
    GHashTableIter it;
    gpointer key;

    if (g_hash_table_remove(f->files, m->path)) {
        return;
    }
    if (!is_dir(f, m->path)) {
        a->type = "ENOENT";
        return;
    }
    g_hash_table_iter_init(&it, f->files);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        if (under(key, m->path)) {
            g_hash_table_iter_remove(&it);
        }
    }
}

static void answer_clear(Answer *a)
{
    if (a->entries != NULL) {
        for (guint i = 0; i < a->entries->len; i++) {
            g_free(g_array_index(a->entries, SbxFileEntry, i).path);
        }
        g_array_unref(a->entries);
    }
    g_free(a->owned);
}

/* ---- serving -------------------------------------------------------------------------------- */

static int send_answer(FakeGuest *g, FakeFiles *f, const SbxFile *m, const Answer *a,
                       const char *fail_message, guint n)
{
    SbxMsg r = {.type = SBX_MSG_FILE_RESULT};
    SbxFileResult *fr = &r.file_result;

    fr->seq = n == f->wrong_seq_at ? m->seq + 1 : m->seq;
    fr->ok = a->type == NULL;
    if (!fr->ok) {
        fr->error.code = SBX_ERR_VALIDATION;
        fr->error.type = (char *)a->type;
        fr->error.message = (char *)(fail_message != NULL ? fail_message : a->type);
        return fake_guest_send(g, &r);
    }
    gint64 lie = m->op == SBX_FILE_WRITE  ? f->write_size_lie
                 : m->op == SBX_FILE_READ ? f->read_size_lie
                                          : 0;
    fr->size = (guint64)((gint64)a->size + lie);
    fr->data = (uint8_t *)a->data;
    fr->len = a->len;
    if (a->entries != NULL) {
        fr->entries = (SbxFileEntry *)a->entries->data;
        fr->n_entries = a->entries->len;
    }
    fr->truncated = a->truncated;
    int rc = fake_guest_send(g, &r);
    if (rc == 0 && n == f->duplicate_at) {
        rc = fake_guest_send(g, &r);
    }
    return rc;
}

/* Answer one request (or not, as the knobs say). -1: stop serving. */
static int serve(FakeGuest *g, FakeFiles *f, const SbxFile *m)
{
    Answer a = {0};
    const char *fail_message = NULL;
    int rc = 0;

    g_mutex_lock(&f->lock);
    guint n = ++f->requests;
    f->ops[m->op]++;
    if (n == f->hangup_at) {
        g_mutex_unlock(&f->lock);
        return -1;
    }
    if (f->fail_type != NULL && --f->fail_countdown == 0) {
        a.type = f->fail_type;
        fail_message = f->fail_message;
        f->fail_type = NULL;
        if (m->op == SBX_FILE_WRITE) {
            g_hash_table_remove(f->writes, m->path);
        }
    } else if (m->op == SBX_FILE_WRITE) {
        answer_write(f, m, &a);
    } else if (m->op == SBX_FILE_READ) {
        answer_read(f, m, &a);
    } else if (m->op == SBX_FILE_LIST) {
        answer_list(f, m, &a);
    } else {
        answer_delete(f, m, &a);
    }
    if (f->silent_from == 0 || n < f->silent_from) {
        rc = send_answer(g, f, m, &a, fail_message, n);
    }
    g_mutex_unlock(&f->lock);
    answer_clear(&a);
    return rc;
}

/*
 * The gather knob: read that many requests before answering the first (they must all be in
 * flight), then see whether the host sent more meanwhile; serve them in order.
 */
static int gather(FakeGuest *g, FakeFiles *f, SbxMsg *first)
{
    SbxMsg *held = g_new0(SbxMsg, f->gather);
    struct pollfd p = {.fd = g->fd, .events = POLLIN};
    guint n = 1;
    int rc = 0;

    held[0] = *first;
    memset(first, 0, sizeof(*first));
    while (n < f->gather && fake_guest_recv(g, &held[n]) == 0 && held[n].type == SBX_MSG_FILE) {
        n++;
    }
    g_mutex_lock(&f->lock);
    f->gathered = n;
    f->more_while_gathering = g->buf_off < g->buf_len || poll(&p, 1, 200) > 0;
    g_mutex_unlock(&f->lock);
    for (guint i = 0; i < n; i++) {
        if (rc == 0 && held[i].type == SBX_MSG_FILE) {
            rc = serve(g, f, &held[i].file);
        }
        sbx_msg_clear(&held[i]);
    }
    sbx_msg_clear(&held[n < f->gather ? n : 0]);
    g_free(held);
    return n < f->gather ? -1 : rc;
}

void fake_guest_serve_files(FakeGuest *g, FakeFiles *f)
{
    SbxMsg m = {0};
    gboolean gathered = FALSE;

    while (fake_guest_recv(g, &m) == 0) {
        if (m.type == SBX_MSG_FILE && f->gather > 1 && !gathered &&
            f->requests + 1 >= MAX(f->gather_at, 1)) {
            gathered = TRUE;
            if (gather(g, f, &m) < 0) {
                return;
            }
            continue;
        }
        int rc = 0;
        if (m.type == SBX_MSG_FILE) {
            rc = serve(g, f, &m.file);
        } else if (m.type == SBX_MSG_PING) {
            m.type = SBX_MSG_PONG;
            rc = fake_guest_send(g, &m);
        } else if (m.type != SBX_MSG_ERROR) { /* the host's last word on a breach */
            fake_guest_fail(g, "unexpected %s while serving files", sbx_msg_type_name(m.type));
        }
        sbx_msg_clear(&m);
        if (rc < 0) {
            return;
        }
    }
}

void fake_guest_script_files(FakeGuest *g)
{
    if (fake_guest_hello(g) == 0) {
        fake_guest_serve_files(g, g->data);
    }
}

int fake_files_serve_one(FakeGuest *g, FakeFiles *f, const SbxFile *m)
{
    return serve(g, f, m);
}
