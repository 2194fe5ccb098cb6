/*
 * Loading and validating machine profiles (format: qemu-profiles/README.md).
 *
 * Every member of the file must be a known field: a typo ("memmory_mib") is an error, never a
 * silently ignored setting. Each error names the file and the field.
 */
#include "profile-private.h"

#include <string.h>

#include "base/jsonfile.h"
#include "base/paths.h"
#include "protocol/json.h"

/*
 * Largest profile file. A profile is a dozen short fields (~300 bytes); 64 KiB leaves room for
 * long descriptions and still refuses a wrong file (an image, a log) before reading it.
 */
#define PROFILE_FILE_MAX (64 * 1024)

/* Profile names are file names and appear in logs: short, no path separators. */
#define PROFILE_NAME_MAX 64

/* A description is for people listing profiles: a paragraph at most. */
#define PROFILE_DESCRIPTION_MAX 1024

/*
 * x86 Linux accepts a 2048-byte command line (COMMAND_LINE_SIZE); our own part (console, quiet,
 * panic, tsc_early_khz) takes under 100 bytes, so 1024 bytes of extras always fit.
 */
#define PROFILE_CMDLINE_EXTRA_MAX 1024

/* A QEMU CPU model name ("max", "Skylake-Client-v4"); no commas, so no properties sneak in. */
#define PROFILE_CPU_MAX 64

/* An image's recipe name: what guest-image/build-image accepts as NAME.recipe. */
#define PROFILE_IMAGE_MAX 64

/*
 * vCPUs: each one is a host thread under TCG (MTTCG) and the sandboxes run one program; 1-2 is
 * the useful range. 64 stops a typo (1000) from creating a thread storm.
 */
#define PROFILE_CPUS_MAX 64

/*
 * Guest RAM: below 64 MiB the kernel, initramfs and a runtime (node) do not fit; above 16 GiB is
 * a typo for a sandbox, and the memfd backing (share=on) would let it reserve that much.
 */
#define PROFILE_MEMORY_MIN 64
#define PROFILE_MEMORY_MAX 16384

typedef struct {
    const char *file;     /* what errors name: the file's base name, or "<name>.json" */
    const char *expected; /* the name the profile must have (its file's), NULL for any */
    SbxProfile *p;
} Ctx;

typedef gboolean (*FieldFunc)(Ctx *ctx, const cJSON *value, GError **error);

static gboolean field_error(Ctx *ctx, const char *field, GError **error, const char *expected)
{
    g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE, "%s: %s: expected %s", ctx->file, field,
                expected);
    return FALSE;
}

/* True if @s has only printable ASCII (no control bytes, no quotes that confuse the kernel). */
static gboolean printable_ascii(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return FALSE;
    return TRUE;
}

/* True if @s is 1..@max chars of [A-Za-z0-9_.-] (plus '-' as first char refused). */
static gboolean simple_token(const char *s, gsize max)
{
    gsize n = strlen(s);

    if (n == 0 || n > max || s[0] == '-' || s[0] == '.')
        return FALSE;
    for (; *s; s++)
        if (!g_ascii_isalnum(*s) && *s != '_' && *s != '-' && *s != '.')
            return FALSE;
    return TRUE;
}

/* An integer in [@min, @max] (2.0 is one; 2.5 and 1e10 are refused). */
static gboolean get_uint(const cJSON *v, guint min, guint max, guint *ret)
{
    int64_t n;

    if (!sbx_json_int64(v, &n) || n < min || n > max)
        return FALSE;
    *ret = (guint)n;
    return TRUE;
}

static gboolean f_name(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!cJSON_IsString(v) || !simple_token(v->valuestring, PROFILE_NAME_MAX))
        return field_error(ctx, "name", error, "a string of 1..64 characters [A-Za-z0-9_.-]");
    ctx->p->name = g_strdup(v->valuestring);
    return TRUE;
}

static gboolean f_description(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!cJSON_IsString(v) || strlen(v->valuestring) > PROFILE_DESCRIPTION_MAX ||
        !g_utf8_validate(v->valuestring, -1, NULL))
        return field_error(ctx, "description", error, "a string of at most 1024 bytes");
    ctx->p->description = g_strdup(v->valuestring);
    return TRUE;
}

static gboolean f_machine(Ctx *ctx, const cJSON *v, GError **error)
{
    if (cJSON_IsString(v) && g_str_equal(v->valuestring, "q35"))
        ctx->p->machine = SBX_MACHINE_Q35;
    else if (cJSON_IsString(v) && g_str_equal(v->valuestring, "microvm"))
        ctx->p->machine = SBX_MACHINE_MICROVM;
    else
        return field_error(ctx, "machine", error, "\"q35\" or \"microvm\"");
    return TRUE;
}

static gboolean f_accel(Ctx *ctx, const cJSON *v, GError **error)
{
    const char *names[] = {"auto", "tcg", "kvm"};

    for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
        if (cJSON_IsString(v) && g_str_equal(v->valuestring, names[i])) {
            ctx->p->accel = (SbxAccel)i;
            return TRUE;
        }
    }
    return field_error(ctx, "accel", error, "\"auto\", \"tcg\" or \"kvm\"");
}

static gboolean f_cpu(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!cJSON_IsString(v) || !simple_token(v->valuestring, PROFILE_CPU_MAX))
        return field_error(ctx, "cpu", error,
                           "a QEMU CPU model name: 1..64 characters [A-Za-z0-9_.-]");
    ctx->p->cpu = g_strdup(v->valuestring);
    return TRUE;
}

static gboolean f_cpus(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!get_uint(v, 1, PROFILE_CPUS_MAX, &ctx->p->cpus))
        return field_error(ctx, "cpus", error, "an integer 1..64");
    return TRUE;
}

static gboolean f_memory(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!get_uint(v, PROFILE_MEMORY_MIN, PROFILE_MEMORY_MAX, &ctx->p->memory_mib))
        return field_error(ctx, "memory_mib", error, "an integer 64..16384");
    return TRUE;
}

static gboolean f_cmdline(Ctx *ctx, const cJSON *v, GError **error)
{
    if (!cJSON_IsString(v) || strlen(v->valuestring) > PROFILE_CMDLINE_EXTRA_MAX ||
        !printable_ascii(v->valuestring))
        return field_error(ctx, "kernel_cmdline_extra", error,
                           "a string of at most 1024 printable ASCII characters");
    g_free(ctx->p->cmdline_extra);
    ctx->p->cmdline_extra = g_strdup(v->valuestring);
    return TRUE;
}

static gboolean f_channel(Ctx *ctx, const cJSON *v, GError **error)
{
    static const SbxChannelKind kinds[] = {SBX_CHANNEL_VSOCK_BRIDGE, SBX_CHANNEL_VIRTIO_SERIAL,
                                           SBX_CHANNEL_VSOCK_KERNEL};

    for (guint i = 0; cJSON_IsString(v) && i < G_N_ELEMENTS(kinds); i++) {
        if (g_str_equal(v->valuestring, sbx_channel_name(kinds[i]))) {
            ctx->p->channel = kinds[i];
            return TRUE;
        }
    }
    return field_error(ctx, "channel", error,
                       "\"vsock-bridge\", \"virtio-serial\" or \"vsock-kernel\"");
}

/* The field's old name and only value, renamed to "channel": say so rather than "unknown". */
static gboolean f_vsock(Ctx *ctx, const cJSON *v, GError **error)
{
    (void)v;
    g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                "%s: vsock: renamed; write \"channel\": \"vsock-bridge\" (or \"virtio-serial\", "
                "\"vsock-kernel\")",
                ctx->file);
    return FALSE;
}

/*
 * The image a profile's VMs run: a recipe's name (guest-image/recipes/NAME.recipe, built into
 * <build>/images/NAME), the same characters build-image allows, so it is one path component.
 * "default" is the default image (build/image) as if the field were absent.
 */
static gboolean recipe_name_char(char c)
{
    return g_ascii_islower(c) || g_ascii_isdigit(c) || c == '_' || c == '-';
}

static gboolean f_image(Ctx *ctx, const cJSON *v, GError **error)
{
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    gsize n = strlen(s);
    gboolean ok = n > 0 && n <= PROFILE_IMAGE_MAX && s[0] != '_' && s[0] != '-';

    for (gsize i = 0; ok && i < n; i++)
        ok = recipe_name_char(s[i]);
    if (!ok)
        return field_error(ctx, "image", error,
                           "a recipe name of 1..64 characters [a-z0-9_-], a letter or digit first");
    g_free(ctx->p->image);
    ctx->p->image = g_str_equal(s, "default") ? NULL : g_strdup(s);
    return TRUE;
}

static const struct {
    const char *name;
    FieldFunc func;
    gboolean required;
} fields[] = {
    {"name", f_name, TRUE},         {"description", f_description, FALSE},
    {"machine", f_machine, TRUE},   {"accel", f_accel, FALSE},
    {"cpu", f_cpu, FALSE},          {"cpus", f_cpus, FALSE},
    {"memory_mib", f_memory, TRUE}, {"kernel_cmdline_extra", f_cmdline, FALSE},
    {"channel", f_channel, FALSE},  {"vsock", f_vsock, FALSE},
    {"image", f_image, FALSE},
};

/* Dispatch one member of the object to its field parser; unknown names fail (repeated ones
 * never get here: sbx_json_parse refuses them). */
static gboolean parse_member(Ctx *ctx, const cJSON *member, guint32 *seen, GError **error)
{
    for (guint i = 0; i < G_N_ELEMENTS(fields); i++) {
        if (!g_str_equal(member->string, fields[i].name))
            continue;
        *seen |= 1u << i;
        return fields[i].func(ctx, member, error);
    }
    g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                "%s: %s: unknown field (known: name, description, machine, accel, cpu, cpus, "
                "memory_mib, kernel_cmdline_extra, channel, image)",
                ctx->file, g_utf8_validate(member->string, -1, NULL) ? member->string : "?");
    return FALSE;
}

static gboolean check_required(Ctx *ctx, guint32 seen, GError **error)
{
    for (guint i = 0; i < G_N_ELEMENTS(fields); i++) {
        if (fields[i].required && !(seen & (1u << i))) {
            g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE, "%s: %s: missing (required)",
                        ctx->file, fields[i].name);
            return FALSE;
        }
    }
    return TRUE;
}

/* The name must match the file name, so that load_named("x") finds the profile named "x". */
static gboolean check_name(Ctx *ctx, GError **error)
{
    if (ctx->expected && !g_str_equal(ctx->expected, ctx->p->name)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                    "%s: name: \"%s\" differs from the file name (expected \"%s\")", ctx->file,
                    ctx->p->name, ctx->expected);
        return FALSE;
    }
    return TRUE;
}

/* Validate the members of @root (a JSON object) into a new profile (path not set). */
static SbxProfile *profile_from_object(Ctx *ctx, const cJSON *root, GError **error)
{
    g_autoptr(SbxProfile) p = g_new0(SbxProfile, 1);
    guint32 seen = 0;
    const cJSON *member;

    ctx->p = p;
    p->accel = SBX_ACCEL_AUTO;
    p->cpus = 1;
    p->cmdline_extra = g_strdup("");
    cJSON_ArrayForEach(member, root)
    {
        if (!parse_member(ctx, member, &seen, error))
            return NULL;
    }
    if (!check_required(ctx, seen, error) || !check_name(ctx, error))
        return NULL;
    return g_steal_pointer(&p);
}

/* Parse @len bytes of @text as one JSON object, as a profile file is. */
static cJSON *parse_object(const char *file, const char *text, gsize len, GError **error)
{
    if (len > PROFILE_FILE_MAX) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE, "%s: larger than %d bytes", file,
                    PROFILE_FILE_MAX);
        return NULL;
    }
    return sbx_json_object_parse(file, text, len, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE, error);
}

SbxProfile *sbx_profile_parse(const char *name, const char *text, gsize len, GError **error)
{
    g_autofree char *file = name ? g_strconcat(name, ".json", NULL) : g_strdup("profile");
    g_autoptr(cJSON) root = NULL;
    Ctx ctx = {file, name, NULL};

    if (name && !simple_token(name, PROFILE_NAME_MAX)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                    "invalid profile name \"%s\": expected 1..64 characters [A-Za-z0-9_.-]",
                    g_utf8_validate(name, -1, NULL) ? name : "?");
        return NULL;
    }
    root = parse_object(file, text, len, error);
    return root ? profile_from_object(&ctx, root, error) : NULL;
}

SbxProfile *sbx_profile_load(const char *path, GError **error)
{
    g_autofree char *file = g_path_get_basename(path);
    g_autofree char *stem = NULL;
    g_autoptr(cJSON) root = NULL;
    Ctx ctx = {file, NULL, NULL};
    SbxProfile *p;

    if (!g_str_has_suffix(file, ".json") || strlen(file) <= strlen(".json")) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                    "%s: a profile file name must end in .json", path);
        return NULL;
    }
    root = sbx_json_file_load(path, PROFILE_FILE_MAX, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE, error);
    if (!root)
        return NULL;
    stem = g_strndup(file, strlen(file) - strlen(".json"));
    ctx.expected = stem;
    p = profile_from_object(&ctx, root, error);
    if (p)
        p->path = g_strdup(path);
    return p;
}

SbxProfile *sbx_profile_load_named(const char *dir, const char *name, GError **error)
{
    g_autofree char *default_dir = dir ? NULL : sbx_paths_profiles_dir();
    g_autofree char *file = NULL;
    g_autofree char *path = NULL;

    if (!simple_token(name, PROFILE_NAME_MAX)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                    "invalid profile name \"%s\": expected 1..64 characters [A-Za-z0-9_.-]",
                    g_utf8_validate(name, -1, NULL) ? name : "?");
        return NULL;
    }
    file = g_strconcat(name, ".json", NULL);
    path = g_build_filename(dir ? dir : default_dir, file, NULL);
    if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
        g_auto(GStrv) names = sbx_profile_list(dir, NULL);
        g_autofree char *known = names ? g_strjoinv(", ", names) : g_strdup("none");
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE,
                    "no profile \"%s\" in %s (available: %s)", name, dir ? dir : default_dir,
                    *known ? known : "none");
        return NULL;
    }
    return sbx_profile_load(path, error);
}

static gint compare_str(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **sbx_profile_list(const char *dir, GError **error)
{
    g_autofree char *default_dir = dir ? NULL : sbx_paths_profiles_dir();
    g_autoptr(GDir) d = g_dir_open(dir ? dir : default_dir, 0, error);
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    const char *entry;

    if (!d)
        return NULL;
    while ((entry = g_dir_read_name(d))) {
        gsize len = strlen(entry);
        if (len > strlen(".json") && g_str_has_suffix(entry, ".json"))
            g_ptr_array_add(names, g_strndup(entry, len - strlen(".json")));
    }
    g_ptr_array_sort(names, compare_str);
    g_ptr_array_add(names, NULL);
    return (char **)g_ptr_array_free(g_steal_pointer(&names), FALSE);
}

const char *sbx_profile_name(const SbxProfile *profile)
{
    return profile->name;
}

const char *sbx_profile_path(const SbxProfile *profile)
{
    return profile->path;
}

SbxMachine sbx_profile_machine(const SbxProfile *profile)
{
    return profile->machine;
}

guint sbx_profile_memory_mib(const SbxProfile *profile)
{
    return profile->memory_mib;
}

SbxAccel sbx_profile_accel(const SbxProfile *profile)
{
    return profile->accel;
}

SbxChannelKind sbx_profile_channel(const SbxProfile *profile)
{
    return profile->channel;
}

const char *sbx_channel_name(SbxChannelKind channel)
{
    switch (channel) {
    case SBX_CHANNEL_VIRTIO_SERIAL:
        return "virtio-serial";
    case SBX_CHANNEL_VSOCK_KERNEL:
        return "vsock-kernel";
    default:
        return "vsock-bridge";
    }
}

const char *sbx_machine_name(SbxMachine machine)
{
    return machine == SBX_MACHINE_MICROVM ? "microvm" : "q35";
}

const char *sbx_accel_name(SbxAccel accel)
{
    switch (accel) {
    case SBX_ACCEL_TCG:
        return "tcg";
    case SBX_ACCEL_KVM:
        return "kvm";
    default:
        return "auto";
    }
}

const char *sbx_profile_image(const SbxProfile *profile)
{
    return profile->image;
}

void sbx_profile_free(SbxProfile *profile)
{
    if (!profile)
        return;
    g_free(profile->image);
    g_free(profile->path);
    g_free(profile->name);
    g_free(profile->description);
    g_free(profile->cpu);
    g_free(profile->cmdline_extra);
    g_free(profile);
}
