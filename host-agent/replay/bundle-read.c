/*
 * Reading a bundle (bundle.h): untrusted bytes from another machine. Each member is checked by
 * its header before a byte of it is written (a plain file, a name of the list, a size within
 * the bound of its kind, the total within the bundle's), written into a private directory
 * (sparse, as the RAM file was), hashed on the way, and the manifest, the last member, must
 * name exactly the members read with their sizes and digests. Only then is the record parsed.
 */
#include "replay/bundle-private.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "protocol/json.h"
#include "protocol/limits.h"
#include "vm/image.h"
#include "vm/snapshot.h"

/* Members: a record, a manifest, 4 snapshot files, 4 image files and a profile are 11; twice
 * that leaves room for an image with more files and refuses an archive of many small ones. */
#define BUNDLE_MEMBERS_MAX 24

/* A member's name below its folder: a plain file name (no path), as an image's are. */
#define BUNDLE_NAME_MAX 64

/* The manifest names up to BUNDLE_MEMBERS_MAX members in ~150 bytes each. */
#define BUNDLE_MANIFEST_MAX (64 * 1024)

/* Small files: a profile (the profile loader's limit is 64 KiB), the snapshot's inputs.json
 * (16 KiB) and digests, the image's manifest.json (64 KiB). */
#define BUNDLE_SMALL_MAX (64 * 1024)

/* A snapshot's device state: ~0.3 MiB for our machines; 256 MiB is far beyond any. */
#define BUNDLE_STATE_MAX (256 * 1024 * 1024)

/* The RAM file: a guest's memory, at most the profile loader's 16384 MiB. */
#define BUNDLE_RAM_MAX (16384ull * 1024 * 1024)

/* An image's file: its rootfs is ~100-300 MiB; 4 GiB is a larger recipe's with room. */
#define BUNDLE_IMAGE_FILE_MAX (4ull * 1024 * 1024 * 1024)

/* All members together, as declared (the RAM file is written sparse: its zero pages cost no
 * disk): one RAM file at its maximum and an image at its maximum. */
#define BUNDLE_TOTAL_MAX (BUNDLE_RAM_MAX + 4 * BUNDLE_IMAGE_FILE_MAX)

/* Read per step, and the page size of the sparse writes. */
#define CHUNK (1024 * 1024)
#define PAGE 4096

/* QEMU's version line, an image id: short texts. */
#define BUNDLE_TEXT_MAX 256

struct SbxBundle {
    char *dir; /* the private directory, removed by sbx_bundle_free() */
    SbxRecord *rec;
    GPtrArray *calls;
    GPtrArray *approvals;
    char *snapshot_dir;
    char *image_dir;
    char *profile_path;
    char *qemu_version;
    char *image_id;           /* the manifest's (checked against the record's) */
    GPtrArray *session_recs;  /* SbxRecord*: its session's executions before it, oldest first */
    GPtrArray *session_calls; /* GPtrArray* of SbxRecordCall*, theirs */
};

typedef struct {
    guint64 size;
    char *sha256;
} Member;

static void member_free(Member *m)
{
    g_free(m->sha256);
    g_free(m);
}

static gboolean invalid(GError **error, const char *path, const char *why)
{
    return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID, "bundle %s: %s", path, why);
}

/* ---- names and sizes ---------------------------------------------------------------------- */

static gboolean plain_name(const char *s)
{
    gsize n = strlen(s);

    if (n == 0 || n > BUNDLE_NAME_MAX || !g_ascii_isalnum(s[0]))
        return FALSE;
    for (gsize i = 0; i < n; i++)
        if (!g_ascii_isalnum(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return FALSE;
    return TRUE;
}

/* The bound of member @name, or 0: not a name a bundle may hold. */
static guint64 member_max(const char *name)
{
    const char *slash = strchr(name, '/');
    const char *base = slash != NULL ? slash + 1 : NULL;

    if (g_str_equal(name, SBX_BUNDLE_MANIFEST))
        return BUNDLE_MANIFEST_MAX;
    if (g_str_equal(name, SBX_BUNDLE_RECORD))
        return SBX_RECORD_PORTABLE_MAX;
    if (g_str_equal(name, SBX_BUNDLE_SESSION))
        return SBX_BUNDLE_SESSION_MAX;
    if (base == NULL || !plain_name(base))
        return 0;
    if (g_str_has_prefix(name, "snapshot/")) {
        if (g_str_equal(base, "ram"))
            return BUNDLE_RAM_MAX;
        if (g_str_equal(base, "state.bin"))
            return BUNDLE_STATE_MAX;
        return g_str_equal(base, "inputs.json") || g_str_equal(base, "digests") ? BUNDLE_SMALL_MAX
                                                                                : 0;
    }
    if (g_str_has_prefix(name, "image/"))
        return BUNDLE_IMAGE_FILE_MAX;
    if (g_str_has_prefix(name, "profile/") && g_str_has_suffix(base, ".json"))
        return BUNDLE_SMALL_MAX;
    return 0;
}

/* ---- the private directory ---------------------------------------------------------------- */

/* Remove @dir and what is in it: plain files and the member folders (made by us: no links). */
static void rm_tree(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);

        if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK))
            rm_tree(path);
        else
            g_unlink(path);
    }
    g_rmdir(dir);
}

static char *make_dir(const char *work_dir, GError **error)
{
    const char *folders[] = {"snapshot", "image", "profile"};
    g_autofree char *tmpl = g_build_filename(work_dir, "bundle-XXXXXX", NULL);

    if (g_mkdir_with_parents(work_dir, 0700) < 0 || g_mkdtemp_full(tmpl, 0700) == NULL) {
        sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "cannot make a directory in %s: %s", work_dir,
                        g_strerror(errno));
        return NULL;
    }
    for (gsize i = 0; i < G_N_ELEMENTS(folders); i++) {
        g_autofree char *sub = g_build_filename(tmpl, folders[i], NULL);

        if (g_mkdir(sub, 0700) < 0) {
            sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "cannot make %s: %s", sub,
                            g_strerror(errno));
            rm_tree(tmpl);
            return NULL;
        }
    }
    return g_steal_pointer(&tmpl);
}

/* ---- members ------------------------------------------------------------------------------ */

/* Write @len bytes of @buf at the file's position, skipping all-zero pages (left as holes). */
static gboolean write_sparse(int fd, const char *buf, gsize len)
{
    static const char zero[PAGE];

    for (gsize off = 0; off < len; off += PAGE) {
        gsize n = MIN((gsize)PAGE, len - off);

        if (memcmp(buf + off, zero, n) == 0) {
            if (lseek(fd, (off_t)n, SEEK_CUR) < 0)
                return FALSE;
        } else if (write(fd, buf + off, n) != (ssize_t)n) {
            return FALSE;
        }
    }
    return TRUE;
}

/* The member @name of @size bytes at the archive's position into @dir, with its digest. */
static gboolean extract(struct archive *a, const char *bundle, const char *dir, const char *name,
                        guint64 size, Member **ret, GError **error)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *buf = g_malloc(CHUNK);
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    guint64 done = 0;
    la_ssize_t n;
    gboolean ok = fd >= 0;

    while (ok && (n = archive_read_data(a, buf, CHUNK)) != 0) {
        if (n < 0 || done + (guint64)n > size) {
            sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID, "bundle %s: %s: %s", bundle, name,
                            n < 0 ? archive_error_string(a) : "longer than its header says");
            close(fd);
            return FALSE;
        }
        g_checksum_update(sum, (const guchar *)buf, (gsize)n);
        ok = write_sparse(fd, buf, (gsize)n);
        done += (guint64)n;
    }
    ok = ok && ftruncate(fd, (off_t)done) == 0;
    if (!ok) {
        int e = errno;

        if (fd >= 0)
            close(fd);
        return sbx_bundle_fail(error, SBX_BUNDLE_ERROR_IO, "cannot write %s: %s", path,
                               g_strerror(e));
    }
    close(fd);
    if (done != size)
        return invalid(error, bundle, "a member is shorter than its header says (truncated?)");
    *ret = g_new0(Member, 1);
    (*ret)->size = size;
    (*ret)->sha256 = g_strdup(g_checksum_get_string(sum));
    return TRUE;
}

/* The header of the next member: a plain file of a known name and a size in its bound. */
static gboolean check_header(struct archive_entry *e, const char *bundle, GHashTable *members,
                             guint64 *total, GError **error)
{
    const char *name = archive_entry_pathname(e);
    guint64 max = name != NULL ? member_max(name) : 0;
    gint64 size = archive_entry_size(e);

    if (max == 0)
        return invalid(error, bundle, "a member has a name a bundle does not hold");
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) != NULL ||
        archive_entry_symlink(e) != NULL)
        return invalid(error, bundle, "a member is not a plain file");
    if (!archive_entry_size_is_set(e) || size < 0 || (guint64)size > max)
        return invalid(error, bundle, "a member is larger than its kind may be");
    if (g_hash_table_contains(members, name))
        return invalid(error, bundle, "a member is there twice");
    if (g_hash_table_size(members) >= BUNDLE_MEMBERS_MAX)
        return invalid(error, bundle, "too many members");
    *total += (guint64)size;
    if (*total > BUNDLE_TOTAL_MAX)
        return invalid(error, bundle, "larger than a bundle may be");
    return TRUE;
}

/* Room for @size more bytes in @dir: a bundle's declared sizes may add up to far more than
 * the state directory's disk holds (its bound is a guest's largest), and filling that disk
 * would harm the server's records; refused before a byte is written. */
static gboolean room_for(const char *dir, guint64 size, const char *bundle, GError **error)
{
    struct statvfs vfs;

    if (statvfs(dir, &vfs) == 0 && size > (guint64)vfs.f_bavail * vfs.f_frsize)
        return invalid(error, bundle,
                       "a member is larger than the free space of the state "
                       "directory's disk");
    return TRUE;
}

/* Every member into @dir; the manifest must be the last. */
static gboolean unpack(const char *bundle, const char *dir, GHashTable *members, GError **error)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    guint64 total = 0;
    gboolean ok = TRUE, manifest = FALSE;
    int rc;

    /* zstd and tar only: nothing else a bundle is, no other decoder exposed to its bytes. */
    archive_read_support_filter_zstd(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, bundle, CHUNK) != ARCHIVE_OK) {
        ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID, "bundle %s: %s", bundle,
                             archive_error_string(a));
        goto out;
    }
    while (ok && (rc = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        Member *m = NULL;

        if (manifest) {
            ok = invalid(error, bundle, "a member follows the manifest");
            break;
        }
        ok = check_header(e, bundle, members, &total, error) &&
             room_for(dir, (guint64)archive_entry_size(e), bundle, error) &&
             extract(a, bundle, dir, archive_entry_pathname(e), (guint64)archive_entry_size(e), &m,
                     error);
        if (ok) {
            manifest = g_str_equal(archive_entry_pathname(e), SBX_BUNDLE_MANIFEST);
            g_hash_table_insert(members, g_strdup(archive_entry_pathname(e)), m);
        }
    }
    if (ok && rc != ARCHIVE_EOF)
        ok = sbx_bundle_fail(error, SBX_BUNDLE_ERROR_INVALID, "bundle %s: %s", bundle,
                             archive_error_string(a));
    if (ok && !manifest)
        ok = invalid(error, bundle, "no manifest at its end (truncated?)");
out:
    archive_read_free(a);
    return ok;
}

/* ---- the manifest ------------------------------------------------------------------------- */

static const char *text_member(const cJSON *o, const char *key, gsize max)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsString(v) && *v->valuestring && strlen(v->valuestring) <= max ? v->valuestring
                                                                                 : NULL;
}

/* Each member read is in "members" with its size and digest, and nothing else is. */
static gboolean check_members(const cJSON *listed, GHashTable *members, const char *bundle,
                              GError **error)
{
    const cJSON *item;

    /* The manifest is not listed in itself. */
    if (!cJSON_IsObject(listed) ||
        (guint)cJSON_GetArraySize(listed) != g_hash_table_size(members) - 1)
        return invalid(error, bundle, "the manifest does not list exactly its members");
    cJSON_ArrayForEach(item, listed)
    {
        const Member *m = g_hash_table_lookup(members, item->string);
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(item, "sha256");
        int64_t size;

        if (m == NULL || g_str_equal(item->string, SBX_BUNDLE_MANIFEST))
            return invalid(error, bundle, "the manifest lists a member that is not there");
        if (!sbx_json_int64(cJSON_GetObjectItemCaseSensitive(item, "size"), &size) || size < 0 ||
            (guint64)size != m->size || !cJSON_IsString(sha) ||
            g_strcmp0(sha->valuestring, m->sha256) != 0) {
            g_autofree char *why = g_strdup_printf(
                "member %s differs from the manifest's size or sha256", item->string);
            return invalid(error, bundle, why);
        }
    }
    return TRUE;
}

typedef struct {
    char *record_id;
    char *qemu_version;
    char *snapshot_key;
    char *image_id;
    char *profile;
} Manifest;

static void manifest_clear(Manifest *m)
{
    g_free(m->record_id);
    g_free(m->qemu_version);
    g_free(m->snapshot_key);
    g_free(m->image_id);
    g_free(m->profile);
}

static gboolean read_manifest_tree(const cJSON *root, GHashTable *members, const char *bundle,
                                   Manifest *out, GError **error)
{
    const char *format = text_member(root, "format", BUNDLE_TEXT_MAX);
    const char *fields[] = {"record_id", "qemu_version", "snapshot_key", "image_id", "profile"};
    char **outs[] = {&out->record_id, &out->qemu_version, &out->snapshot_key, &out->image_id,
                     &out->profile};
    int64_t created;

    if (!cJSON_IsObject(root) || g_strcmp0(format, SBX_BUNDLE_FORMAT) != 0)
        return invalid(error, bundle, "not a bundle of format " SBX_BUNDLE_FORMAT);
    for (gsize i = 0; i < G_N_ELEMENTS(fields); i++) {
        const char *v = text_member(root, fields[i], BUNDLE_TEXT_MAX);

        if (v == NULL) {
            g_autofree char *why = g_strdup_printf("the manifest's %s is missing", fields[i]);
            return invalid(error, bundle, why);
        }
        *outs[i] = g_strdup(v);
    }
    if (!sbx_json_int64(cJSON_GetObjectItemCaseSensitive(root, "created_at_ms"), &created))
        return invalid(error, bundle, "the manifest's created_at_ms is missing");
    return check_members(cJSON_GetObjectItemCaseSensitive(root, "members"), members, bundle, error);
}

static gboolean read_manifest(const char *dir, GHashTable *members, const char *bundle,
                              Manifest *out, GError **error)
{
    g_autofree char *path = g_build_filename(dir, SBX_BUNDLE_MANIFEST, NULL);
    g_autofree char *text = NULL;
    char *why = NULL;
    gsize len = 0;
    cJSON *root;
    gboolean ok;

    if (!g_file_get_contents(path, &text, &len, error))
        return FALSE;
    root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    free(why);
    if (root == NULL)
        return invalid(error, bundle, "the manifest is not JSON");
    ok = read_manifest_tree(root, members, bundle, out, error);
    cJSON_Delete(root);
    return ok;
}

/* ---- the record and what it needs --------------------------------------------------------- */

/* The record agrees with the manifest, and each file the replay opens is there. */
static gboolean check_record(SbxBundle *b, const Manifest *m, GHashTable *members,
                             const char *bundle, GError **error)
{
    const char *needed[] = {"snapshot/inputs.json", "snapshot/state.bin", "snapshot/ram",
                            "image/manifest.json"};
    g_autofree char *profile = g_strdup_printf("profile/%s.json", m->profile);

    if (g_strcmp0(b->rec->id, m->record_id) != 0 ||
        g_strcmp0(b->rec->snapshot_key, m->snapshot_key) != 0 ||
        g_strcmp0(b->rec->image_id, m->image_id) != 0 ||
        g_strcmp0(b->rec->profile, m->profile) != 0)
        return invalid(error, bundle, "the record and the manifest disagree");
    if (!g_hash_table_contains(members, profile))
        return invalid(error, bundle, "the record's profile is missing");
    for (gsize i = 0; i < G_N_ELEMENTS(needed); i++)
        if (!g_hash_table_contains(members, needed[i])) {
            g_autofree char *why = g_strdup_printf("%s is missing", needed[i]);
            return invalid(error, bundle, why);
        }
    b->profile_path = g_build_filename(b->dir, profile, NULL);
    return TRUE;
}

/* The snapshot's inputs.json is the one the record names (its key). */
static gboolean check_snapshot_key(const SbxBundle *b, const char *bundle, GError **error)
{
    g_autofree char *path = g_build_filename(b->snapshot_dir, "inputs.json", NULL);
    g_autofree char *text = NULL;
    SbxSnapshotInputs in = {0};
    gsize len = 0;
    gboolean ok;

    if (!g_file_get_contents(path, &text, &len, error) ||
        !sbx_snapshot_inputs_from_json(text, len, &in, error))
        return FALSE;
    ok = g_strcmp0(in.key, b->rec->snapshot_key) == 0 ||
         invalid(error, bundle, "the snapshot is not the one the record names");
    sbx_snapshot_inputs_clear(&in);
    return ok;
}

static gboolean read_record(SbxBundle *b, GError **error)
{
    g_autofree char *path = g_build_filename(b->dir, SBX_BUNDLE_RECORD, NULL);
    g_autofree char *text = NULL;
    gsize len = 0;

    return g_file_get_contents(path, &text, &len, error) &&
           sbx_record_from_json(text, len, &b->rec, &b->calls, &b->approvals, error);
}

/* session.jsonl, if there: the executions of the record's session before it. */
static gboolean read_session(SbxBundle *b, const char *bundle, GError **error)
{
    g_autofree char *path = g_build_filename(b->dir, SBX_BUNDLE_SESSION, NULL);
    g_autofree char *text = NULL;
    gsize len = 0;

    b->session_recs = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_record_free);
    b->session_calls = g_ptr_array_new_with_free_func((GDestroyNotify)g_ptr_array_unref);
    if (!g_file_test(path, G_FILE_TEST_EXISTS))
        return TRUE;
    if (b->rec->session_id == NULL)
        return invalid(error, bundle, "executions of a session, but the record is of none");
    if (!g_file_get_contents(path, &text, &len, error))
        return FALSE;
    for (char *line = text, *end; line < text + len; line = end + 1) {
        SbxRecord *rec = NULL;
        GPtrArray *calls = NULL, *approvals = NULL;
        end = memchr(line, '\n', text + len - line);
        if (end == NULL)
            return invalid(error, bundle, "session.jsonl does not end with a newline");
        if (b->session_recs->len == SBX_BUNDLE_SESSION_RECORDS_MAX)
            return invalid(error, bundle, "too many executions of the session");
        if (!sbx_record_from_json(line, (gsize)(end - line), &rec, &calls, &approvals, error))
            return FALSE;
        g_ptr_array_unref(approvals);
        g_ptr_array_add(b->session_recs, rec);
        g_ptr_array_add(b->session_calls, calls);
        if (g_strcmp0(rec->session_id, b->rec->session_id) != 0)
            return invalid(error, bundle, "an execution of another session");
    }
    return TRUE;
}

static gboolean open_in(SbxBundle *b, const char *path, GError **error)
{
    g_autoptr(GHashTable) members =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)member_free);
    Manifest m = {0};
    gboolean ok;

    b->snapshot_dir = g_build_filename(b->dir, "snapshot", NULL);
    b->image_dir = g_build_filename(b->dir, "image", NULL);
    ok = unpack(path, b->dir, members, error) && read_manifest(b->dir, members, path, &m, error);
    if (ok && !g_hash_table_contains(members, SBX_BUNDLE_RECORD))
        ok = invalid(error, path, "the record is missing");
    ok = ok && read_record(b, error) && check_record(b, &m, members, path, error) &&
         check_snapshot_key(b, path, error) && read_session(b, path, error);
    if (ok) {
        b->qemu_version = g_steal_pointer(&m.qemu_version);
        b->image_id = g_steal_pointer(&m.image_id);
    }
    manifest_clear(&m);
    return ok;
}

gboolean sbx_bundle_open(const char *path, const char *work_dir, SbxBundle **ret, GError **error)
{
    g_autoptr(SbxBundle) b = g_new0(SbxBundle, 1);

    if ((b->dir = make_dir(work_dir, error)) == NULL)
        return FALSE;
    if (!open_in(b, path, error))
        return FALSE; /* sbx_bundle_free() removes the directory */
    *ret = g_steal_pointer(&b);
    return TRUE;
}

const SbxRecord *sbx_bundle_record(const SbxBundle *b)
{
    return b->rec;
}

const GPtrArray *sbx_bundle_calls(const SbxBundle *b)
{
    return b->calls;
}

const GPtrArray *sbx_bundle_approvals(const SbxBundle *b)
{
    return b->approvals;
}

const char *sbx_bundle_snapshot_dir(const SbxBundle *b)
{
    return b->snapshot_dir;
}

const char *sbx_bundle_image_dir(const SbxBundle *b)
{
    return b->image_dir;
}

const char *sbx_bundle_profile_path(const SbxBundle *b)
{
    return b->profile_path;
}

const char *sbx_bundle_qemu_version(const SbxBundle *b)
{
    return b->qemu_version;
}

/* @dir and its files readable by all (an image's: nothing in it is secret), @dir itself too. */
static gboolean open_to_all(const char *dir, GError **error)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, error);
    const char *name;

    if (d == NULL || chmod(dir, 0755) < 0) {
        if (d != NULL)
            g_set_error(error, SBX_BUNDLE_ERROR, SBX_BUNDLE_ERROR_IO, "chmod %s: %s", dir,
                        g_strerror(errno));
        return FALSE;
    }
    while ((name = g_dir_read_name(d)) != NULL) {
        g_autofree char *path = g_build_filename(dir, name, NULL);
        if (chmod(path, 0644) < 0) {
            g_set_error(error, SBX_BUNDLE_ERROR, SBX_BUNDLE_ERROR_IO, "chmod %s: %s", path,
                        g_strerror(errno));
            return FALSE;
        }
    }
    return TRUE;
}

gboolean sbx_bundle_place_image(SbxBundle *b, const char *images_dir, GError **error)
{
    g_autofree char *target = NULL;
    g_autofree char *image_id = NULL;

    image_id = g_strdup(b->image_id);
    target = g_strdup_printf("%s/bundle-%s", images_dir, image_id);
    g_autoptr(SbxImage) there = sbx_image_open(target, NULL);
    if (there != NULL && strcmp(there->hash, image_id) == 0) {
        g_free(b->image_dir);
        b->image_dir = g_steal_pointer(&target); /* placed by an earlier bundle */
        return TRUE;
    }
    if (there != NULL || g_file_test(target, G_FILE_TEST_EXISTS)) {
        g_set_error(error, SBX_BUNDLE_ERROR, SBX_BUNDLE_ERROR_IO,
                    "%s exists and is not image %s: remove it", target, image_id);
        return FALSE;
    }
    if (g_mkdir_with_parents(images_dir, 0755) < 0 || rename(b->image_dir, target) < 0) {
        g_set_error(error, SBX_BUNDLE_ERROR, SBX_BUNDLE_ERROR_IO, "place the image in %s: %s",
                    target, g_strerror(errno));
        return FALSE;
    }
    g_free(b->image_dir);
    b->image_dir = g_steal_pointer(&target);
    return open_to_all(b->image_dir, error);
}

void sbx_bundle_take_session(SbxBundle *b, GPtrArray **ret_records, GPtrArray **ret_calls)
{
    *ret_records = g_steal_pointer(&b->session_recs);
    *ret_calls = g_steal_pointer(&b->session_calls);
}

void sbx_bundle_take_record(SbxBundle *b, SbxRecord **ret_rec, GPtrArray **ret_calls)
{
    *ret_rec = g_steal_pointer(&b->rec);
    *ret_calls = g_steal_pointer(&b->calls);
}

void sbx_bundle_free(SbxBundle *b)
{
    if (b == NULL)
        return;
    if (b->dir != NULL)
        rm_tree(b->dir);
    g_free(b->dir);
    sbx_record_free(b->rec);
    if (b->calls != NULL)
        g_ptr_array_unref(b->calls);
    if (b->approvals != NULL)
        g_ptr_array_unref(b->approvals);
    g_free(b->snapshot_dir);
    g_free(b->image_dir);
    g_free(b->profile_path);
    g_free(b->qemu_version);
    g_free(b->image_id);
    if (b->session_recs != NULL)
        g_ptr_array_unref(b->session_recs);
    if (b->session_calls != NULL)
        g_ptr_array_unref(b->session_calls);
    g_free(b);
}
