/*
 * Writing a bundle (bundle.h): the record from the store, the snapshot, image and profile it
 * ran on, each member hashed as it is written, and the manifest last (so nothing is read
 * twice). libarchive writes the tar (pax) and compresses it with zstd.
 */
#include "replay/bundle-private.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json-builder.h"
#include "vm/image.h"
#include "vm/profile.h"
#include "vm/snapshot-pin.h"

/* zstd level 3 (its default): the snapshot's RAM is mostly zero pages and compresses ~10x
 * already at level 1-3; higher levels cost seconds per GiB for a few percent
 * (docs/measurements.md, "Bundles"). */
#define BUNDLE_ZSTD_LEVEL "3"

/* Read and written per step: large enough that a GiB of RAM file is a thousand steps. */
#define CHUNK (1024 * 1024)

G_DEFINE_QUARK(sbx - bundle - error - quark, sbx_bundle_error)

gboolean sbx_bundle_fail(GError **error, SbxBundleErrorCode code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, SBX_BUNDLE_ERROR, code, msg);
    return FALSE;
}

typedef struct {
    struct archive *a;
    SbxJsonb members; /* the manifest's "members" object, filled as members are written */
} Writer;

static gboolean archive_fail(Writer *w, const char *what, GError **error)
{
    return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "bundle: %s: %s", what,
                           archive_error_string(w->a));
}

static gboolean header(Writer *w, const char *name, gint64 size, GError **error)
{
    struct archive_entry *e = archive_entry_new();
    int rc;

    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0600);
    archive_entry_set_size(e, size);
    archive_entry_set_mtime(e, g_get_real_time() / G_USEC_PER_SEC, 0);
    rc = archive_write_header(w->a, e);
    archive_entry_free(e);
    return rc == ARCHIVE_OK || archive_fail(w, name, error);
}

static gboolean data(Writer *w, const char *name, const void *buf, gsize len, GChecksum *sum,
                     GError **error)
{
    g_checksum_update(sum, buf, len);
    return archive_write_data(w->a, buf, len) == (la_ssize_t)len || archive_fail(w, name, error);
}

static void note_member(Writer *w, const char *name, gint64 size, GChecksum *sum)
{
    sbx_jsonb_key(&w->members, name);
    sbx_jsonb_begin_object(&w->members);
    sbx_jsonb_member_int(&w->members, "size", size);
    sbx_jsonb_member_string(&w->members, "sha256", g_checksum_get_string(sum));
    sbx_jsonb_end_object(&w->members);
}

static gboolean add_bytes(Writer *w, const char *name, const char *buf, gsize len, GError **error)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);

    if (!header(w, name, (gint64)len, error) || !data(w, name, buf, len, sum, error))
        return FALSE;
    note_member(w, name, (gint64)len, sum);
    return TRUE;
}

/* The file at @path as member @name: exactly the size it had when its header was written. */
static gboolean add_file(Writer *w, const char *name, const char *path, GError **error)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    g_autofree char *buf = g_malloc(CHUNK);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    gint64 done = 0;
    gboolean ok;

    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "bundle: cannot read %s: %s", path,
                             fd < 0 ? g_strerror(errno) : "not a regular file");
        goto out;
    }
    ok = header(w, name, st.st_size, error);
    while (ok && done < st.st_size) {
        ssize_t n = read(fd, buf, MIN((gint64)CHUNK, st.st_size - done));

        if (n <= 0) {
            ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "bundle: %s: %s", path,
                                 n < 0 ? g_strerror(errno) : "shrank while read");
            break;
        }
        ok = data(w, name, buf, (gsize)n, sum, error);
        done += n;
    }
    if (ok)
        note_member(w, name, st.st_size, sum);
out:
    if (fd >= 0)
        close(fd);
    return ok;
}

static gboolean add_in(Writer *w, const char *folder, const char *path, GError **error)
{
    g_autofree char *base = g_path_get_basename(path);
    g_autofree char *name = g_strconcat(folder, "/", base, NULL);

    return add_file(w, name, path, error);
}

/* The members: record, snapshot, image, profile. */
static gboolean add_members(Writer *w, const char *record_json, const char *session_jsonl,
                            SbxSnapshot *snap, const SbxImage *image, const SbxProfile *profile,
                            GError **error)
{
    const char *snapshot_files[] = SBX_BUNDLE_SNAPSHOT_FILES;
    g_autofree char *image_manifest = g_build_filename(image->dir, "manifest.json", NULL);

    if (!add_bytes(w, SBX_BUNDLE_RECORD, record_json, strlen(record_json), error))
        return FALSE;
    if (session_jsonl != NULL &&
        !add_bytes(w, SBX_BUNDLE_SESSION, session_jsonl, strlen(session_jsonl), error))
        return FALSE;
    for (gsize i = 0; i < G_N_ELEMENTS(snapshot_files); i++) {
        g_autofree char *path = g_build_filename(sbx_snapshot_dir(snap), snapshot_files[i], NULL);

        if (!add_in(w, "snapshot", path, error))
            return FALSE;
    }
    return add_in(w, "image", image_manifest, error) && add_in(w, "image", image->kernel, error) &&
           add_in(w, "image", image->initramfs, error) &&
           add_in(w, "image", image->rootfs, error) &&
           add_in(w, "profile", sbx_profile_path(profile), error);
}

static char *manifest_json(Writer *w, const SbxRecord *rec, const SbxSnapshot *snap)
{
    SbxJsonb b;
    g_autofree char *members = NULL;

    sbx_jsonb_end_object(&w->members);
    members = sbx_jsonb_finish(&w->members);
    sbx_jsonb_init(&w->members); /* spent: a fresh one for writer_clear() */
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "format", SBX_BUNDLE_FORMAT);
    sbx_jsonb_member_string(&b, "record_id", rec->id);
    sbx_jsonb_member_int(&b, "created_at_ms", g_get_real_time() / 1000);
    sbx_jsonb_member_string(&b, "qemu_version", sbx_snapshot_inputs(snap)->qemu_version);
    sbx_jsonb_member_string(&b, "snapshot_key", rec->snapshot_key);
    sbx_jsonb_member_string(&b, "image_id", rec->image_id);
    sbx_jsonb_member_string(&b, "profile", rec->profile);
    sbx_jsonb_member_raw(&b, "members", members);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

/* Write the bundle into @fd (a temporary file beside the destination). */
static gboolean write_to(int fd, const SbxRecord *rec, const char *record_json,
                         const char *session_jsonl, SbxSnapshot *snap, const SbxImage *image,
                         const SbxProfile *profile, GError **error)
{
    Writer w = {.a = archive_write_new()};
    g_autofree char *manifest = NULL;
    gboolean ok;

    sbx_jsonb_init(&w.members);
    sbx_jsonb_begin_object(&w.members);
    ok = (archive_write_set_format_pax_restricted(w.a) == ARCHIVE_OK &&
          archive_write_add_filter_zstd(w.a) == ARCHIVE_OK &&
          archive_write_set_filter_option(w.a, "zstd", "compression-level", BUNDLE_ZSTD_LEVEL) ==
              ARCHIVE_OK &&
          archive_write_open_fd(w.a, fd) == ARCHIVE_OK) ||
         archive_fail(&w, "cannot start", error);
    ok = ok && add_members(&w, record_json, session_jsonl, snap, image, profile, error);
    if (ok) {
        manifest = manifest_json(&w, rec, snap);
        ok = add_bytes(&w, SBX_BUNDLE_MANIFEST, manifest, strlen(manifest), error);
    }
    ok = ok && (archive_write_close(w.a) == ARCHIVE_OK || archive_fail(&w, "cannot end", error));
    archive_write_free(w.a);
    sbx_jsonb_clear(&w.members);
    return ok;
}

/* What the record ran on, still here: its profile, its image, its snapshot (held open). */
static gboolean find_inputs(const SbxRecord *rec, SbxProfile **ret_profile, SbxImage **ret_image,
                            SbxSnapshot **ret_snap, GError **error)
{
    g_autoptr(SbxProfile) profile = NULL;
    g_autoptr(SbxImage) image = NULL;

    if (rec->profile == NULL || rec->image_id == NULL)
        return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_GONE,
                               "record %s names no profile or image: it has nothing to replay",
                               rec->id);
    if (!(profile = sbx_profile_load_named(NULL, rec->profile, error)) ||
        !(image = sbx_image_open_for(profile, error))) {
        g_prefix_error(error, "record %s: ", rec->id);
        return FALSE;
    }
    if (g_strcmp0(image->hash, rec->image_id) != 0)
        return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_GONE,
                               "image %s of record %s is gone (profile %s runs image %s now: "
                               "rebuilt since)",
                               rec->image_id, rec->id, rec->profile, image->hash);
    *ret_snap = sbx_snapshot_find_kept(NULL, rec->id, rec->snapshot_key, profile, image, error);
    if (*ret_snap == NULL)
        return FALSE;
    *ret_profile = g_steal_pointer(&profile);
    *ret_image = g_steal_pointer(&image);
    return TRUE;
}

static gboolean write_file(const char *path, const SbxRecord *rec, const char *record_json,
                           const char *session_jsonl, SbxSnapshot *snap, const SbxImage *image,
                           const SbxProfile *profile, GError **error)
{
    g_autofree char *tmp = g_strconcat(path, ".tmp-XXXXXX", NULL);
    int fd = g_mkstemp_full(tmp, O_RDWR | O_CLOEXEC, 0600);
    gboolean ok;

    if (fd < 0)
        return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "cannot create %s: %s", tmp,
                               g_strerror(errno));
    ok = write_to(fd, rec, record_json, session_jsonl, snap, image, profile, error);
    if (ok && fsync(fd) < 0)
        ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "%s: %s", tmp, g_strerror(errno));
    close(fd);
    if (ok && rename(tmp, path) < 0)
        ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "cannot rename %s to %s: %s", tmp, path,
                             g_strerror(errno));
    if (!ok)
        g_unlink(tmp);
    return ok;
}

/*
 * The executions of @rec's session before it, oldest first, one portable record a line (the
 * portable form escapes every newline): its replay runs them first (replay.h). NULL in
 * *@ret: not a session's, or the first of it.
 */
static gboolean session_before(SbxStore *store, const char *tenant_id, const SbxRecord *rec,
                               char **ret, GError **error)
{
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GString) out = g_string_new(NULL);
    SbxRecordFilter f = {.tenant_id = tenant_id,
                         .session_id = rec->session_id,
                         .limit = SBX_BUNDLE_SESSION_RECORDS_MAX + 1,
                         .oldest_first = TRUE};
    guint i;

    *ret = NULL;
    if (rec->session_id == NULL)
        return TRUE;
    if (!sbx_records_list(store, &f, &list, error))
        return FALSE;
    for (i = 0; i < list->len && strcmp(((SbxRecord *)list->pdata[i])->id, rec->id) != 0; i++) {
        const char *id = ((SbxRecord *)list->pdata[i])->id;
        g_autoptr(SbxRecord) before = NULL;
        g_autoptr(GPtrArray) calls = NULL, approvals = NULL;
        if (!sbx_records_get(store, tenant_id, id, &before, error) ||
            !sbx_records_get_calls(store, tenant_id, id, &calls, &approvals, error))
            return FALSE;
        g_autofree char *json = sbx_record_to_portable_json(before, calls, approvals);
        g_string_append(out, json);
        g_string_append_c(out, '\n');
        if (out->len > SBX_BUNDLE_SESSION_MAX)
            return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID,
                                   "record %s: its session's executions before it are more than "
                                   "a bundle carries (%d MiB)",
                                   rec->id, SBX_BUNDLE_SESSION_MAX >> 20);
    }
    if (i == list->len)
        return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID,
                               "record %s: more than %d executions of its session before it",
                               rec->id, SBX_BUNDLE_SESSION_RECORDS_MAX);
    *ret = i > 0 ? g_string_free(g_steal_pointer(&out), FALSE) : NULL;
    return TRUE;
}

gboolean sbx_bundle_export(SbxStore *store, const char *tenant_id, const char *id, const char *path,
                           GError **error)
{
    g_autoptr(SbxRecord) rec = NULL;
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL;
    g_autoptr(SbxProfile) profile = NULL;
    g_autoptr(SbxImage) image = NULL;
    g_autoptr(SbxSnapshot) snap = NULL;
    g_autofree char *json = NULL;
    g_autofree char *session = NULL;

    if (!sbx_records_get(store, tenant_id, id, &rec, error) ||
        !sbx_records_get_calls(store, tenant_id, id, &calls, &approvals, error) ||
        !session_before(store, tenant_id, rec, &session, error) ||
        !find_inputs(rec, &profile, &image, &snap, error))
        return FALSE;
    json = sbx_record_to_portable_json(rec, calls, approvals);
    return write_file(path, rec, json, session, snap, image, profile, error);
}
