/*
 * What a snapshot depends on, its key, and inputs.json (snapshot.h). Pure, apart from nothing:
 * the QEMU version and the profile bytes are read by the caller.
 */
#include "snapshot.h"

#include <string.h>

#include "base/jsonfile.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "qemu.h"

static char *sha256_hex(const char *data, gsize len)
{
    return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)data, len);
}

void sbx_snapshot_inputs_compute(SbxSnapshotInputs *out, const char *image_id,
                                 const char *profile_name, const char *profile_text,
                                 gsize profile_len, const char *qemu_version, const char *recipe)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);

    memset(out, 0, sizeof(*out));
    out->format = g_strdup(SBX_SNAPSHOT_FORMAT);
    out->image_id = g_strdup(image_id);
    out->profile_sha256 = sha256_hex(profile_text, profile_len);
    out->qemu_version = g_strdup(qemu_version);
    out->recipe_sha256 = sha256_hex(recipe, strlen(recipe));
    /* Each field NUL-terminated: no two different tuples hash the same bytes. */
    const char *fields[] = {out->format, out->image_id, out->profile_sha256, out->qemu_version,
                            out->recipe_sha256};
    for (guint i = 0; i < G_N_ELEMENTS(fields); i++)
        g_checksum_update(sum, (const guchar *)fields[i], (gssize)strlen(fields[i]) + 1);
    out->key = g_strdup(g_checksum_get_string(sum));
    out->profile_name = g_strdup(profile_name);
}

void sbx_snapshot_inputs_clear(SbxSnapshotInputs *in)
{
    g_free(in->format);
    g_free(in->image_id);
    g_free(in->profile_sha256);
    g_free(in->qemu_version);
    g_free(in->recipe_sha256);
    g_free(in->key);
    g_free(in->profile_name);
    g_free(in->image_dir);
    memset(in, 0, sizeof(*in));
}

typedef struct {
    const char *name; /* in inputs.json and in error messages */
    gsize offset;
} Field;

static const Field fields[] = {
    {"format", G_STRUCT_OFFSET(SbxSnapshotInputs, format)},
    {"qemu_version", G_STRUCT_OFFSET(SbxSnapshotInputs, qemu_version)},
    {"image_id", G_STRUCT_OFFSET(SbxSnapshotInputs, image_id)},
    {"profile_sha256", G_STRUCT_OFFSET(SbxSnapshotInputs, profile_sha256)},
    {"recipe_sha256", G_STRUCT_OFFSET(SbxSnapshotInputs, recipe_sha256)},
    {"key", G_STRUCT_OFFSET(SbxSnapshotInputs, key)},
};

static char **field_ptr(const SbxSnapshotInputs *in, const Field *f)
{
    return (char **)((char *)in + f->offset);
}

gboolean sbx_snapshot_inputs_check(const SbxSnapshotInputs *recorded,
                                   const SbxSnapshotInputs *current, const char *dir,
                                   GError **error)
{
    for (guint i = 0; i < G_N_ELEMENTS(fields); i++) {
        const char *a = *field_ptr(recorded, &fields[i]);
        const char *b = *field_ptr(current, &fields[i]);
        if (g_strcmp0(a, b) != 0) {
            g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT,
                        "snapshot %s was made with %s '%s', but this host has '%s': it cannot "
                        "be restored here (remove it; `sandbox run` makes a matching one)",
                        dir, fields[i].name, a ? a : "(none)", b ? b : "(none)");
            return FALSE;
        }
    }
    return TRUE;
}

char *sbx_snapshot_inputs_to_json(const SbxSnapshotInputs *in)
{
    g_autoptr(cJSON) obj = cJSON_CreateObject();

    for (guint i = 0; i < G_N_ELEMENTS(fields); i++)
        cJSON_AddStringToObject(obj, fields[i].name, *field_ptr(in, &fields[i]));
    if (in->profile_name)
        cJSON_AddStringToObject(obj, "profile_name", in->profile_name);
    if (in->image_dir)
        cJSON_AddStringToObject(obj, "image_dir", in->image_dir);
    char *text = sbx_json_print(obj);
    char *out = g_strdup_printf("%s\n", text);
    cJSON_free(text);
    return out;
}

/* The longest input we record is QEMU's version line; 1 KiB per field bounds a damaged file. */
#define FIELD_MAX 1024

gboolean sbx_snapshot_inputs_from_json(const char *text, gsize len, SbxSnapshotInputs *out,
                                       GError **error)
{
    g_autoptr(cJSON) obj = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, NULL);

    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(obj)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT, "inputs.json: not a JSON object");
        return FALSE;
    }
    for (guint i = 0; i < G_N_ELEMENTS(fields); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, fields[i].name);
        if (!cJSON_IsString(v) || strlen(v->valuestring) > FIELD_MAX) {
            sbx_snapshot_inputs_clear(out);
            g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT,
                        "inputs.json: \"%s\" missing or not a string of at most %d bytes",
                        fields[i].name, FIELD_MAX);
            return FALSE;
        }
        *field_ptr(out, &fields[i]) = g_strdup(v->valuestring);
    }
    /* Optional: snapshots made before it was recorded have none. */
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "profile_name");
    if (cJSON_IsString(name) && strlen(name->valuestring) <= FIELD_MAX)
        out->profile_name = g_strdup(name->valuestring);
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(obj, "image_dir");
    if (cJSON_IsString(dir) && strlen(dir->valuestring) <= FIELD_MAX)
        out->image_dir = g_strdup(dir->valuestring);
    return TRUE;
}

char *sbx_snapshot_recipe(const SbxProfile *profile, SbxAccel accel, guint tsc_khz)
{
    /*
     * The template's command line with fixed stand-ins for what differs per VM (socket and
     * RAM paths, fd numbers); the restore line is derived from it by qemu.c, so this covers
     * both. The image's paths are left out: the image id covers the files' contents.
     */
    SbxImage image = {.kernel = "KERNEL", .initramfs = "INITRAMFS", .rootfs = "ROOTFS"};
    SbxQemuRuntime rt = {.qemu = "qemu",
                         .accel = accel,
                         .tsc_khz = tsc_khz,
                         .qmp_fd = 3,
                         .console_fd = 4,
                         .vhost_user_path = "VHOST",
                         .serial_path = "SERIAL",
                         .guest_cid = 3, /* per VM (vsock-kernel): a fixed stand-in */
                         .ram_path = "RAM",
                         .snapshot_layout = TRUE};
    g_auto(GStrv) argv = sbx_qemu_argv(profile, &image, &rt);

    return g_strjoinv("\n", argv);
}
