/*
 * Tenants (tenants.h): names, quotas and catalogs in the tenants and tenant_catalogs tables, API
 * keys made from getrandom(2) and kept only as their SHA-256.
 */
#include "tenants.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "store-private.h"

#define TENANT_COLUMNS                                                                             \
    "id, name, created_at, key_prefix, max_concurrent, max_per_minute, max_timeout_ms,"            \
    " max_output_bytes, max_sessions, max_session_memory_mib"

void sbx_tenant_free(SbxTenant *tenant)
{
    if (tenant == NULL) {
        return;
    }
    g_free(tenant->id);
    g_free(tenant->name);
    g_free(tenant->key_prefix);
    g_strfreev(tenant->catalogs);
    g_free(tenant);
}

/* Whether @s has the form of a tenant id, "t_" and 16 lowercase hex digits. */
static gboolean looks_like_id(const char *s)
{
    if (strlen(s) != 18 || strncmp(s, "t_", 2) != 0) {
        return FALSE;
    }
    for (const char *p = s + 2; *p != '\0'; p++) {
        if (!g_ascii_isxdigit(*p) || g_ascii_isupper(*p)) {
            return FALSE;
        }
    }
    return TRUE;
}

gboolean sbx_tenant_name_valid(const char *name)
{
    gsize len = name != NULL ? strlen(name) : 0;

    if (len == 0 || len > SBX_TENANT_NAME_MAX) {
        return FALSE;
    }
    for (const char *p = name; *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && *p != '.' && *p != '_' && *p != '-') {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean invalid(GError **error, const char *what, guint64 max)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID, "%s: at most %" G_GUINT64_FORMAT,
                what, max);
    return FALSE;
}

gboolean sbx_tenant_quotas_resolve(const SbxTenantQuotas *q, SbxTenantQuotas *ret, GError **error)
{
    SbxTenantQuotas r = q != NULL ? *q : (SbxTenantQuotas){0};

    r.max_concurrent = r.max_concurrent != 0 ? r.max_concurrent : SBX_TENANT_CONCURRENT_DEFAULT;
    r.max_per_minute = r.max_per_minute != 0 ? r.max_per_minute : SBX_TENANT_PER_MINUTE_DEFAULT;
    r.max_timeout_ms = r.max_timeout_ms != 0 ? r.max_timeout_ms : SBX_TENANT_TIMEOUT_DEFAULT_MS;
    r.max_output_bytes = r.max_output_bytes != 0 ? r.max_output_bytes : SBX_TENANT_OUTPUT_DEFAULT;
    r.max_sessions = r.max_sessions != 0 ? r.max_sessions : SBX_TENANT_SESSIONS_DEFAULT;
    r.max_session_memory_mib = r.max_session_memory_mib != 0
                                   ? r.max_session_memory_mib
                                   : SBX_TENANT_SESSION_MEMORY_DEFAULT_MIB;
    if (r.max_concurrent > SBX_TENANT_CONCURRENT_MAX) {
        return invalid(error, "max_concurrent", SBX_TENANT_CONCURRENT_MAX);
    }
    if (r.max_per_minute > SBX_TENANT_PER_MINUTE_MAX) {
        return invalid(error, "max_per_minute", SBX_TENANT_PER_MINUTE_MAX);
    }
    if (r.max_timeout_ms > SBX_TENANT_TIMEOUT_MAX_MS) {
        return invalid(error, "max_timeout_ms", SBX_TENANT_TIMEOUT_MAX_MS);
    }
    if (r.max_output_bytes > SBX_TENANT_OUTPUT_MAX) {
        return invalid(error, "max_output_bytes", SBX_TENANT_OUTPUT_MAX);
    }
    if (r.max_sessions > SBX_TENANT_SESSIONS_MAX) {
        return invalid(error, "max_sessions", SBX_TENANT_SESSIONS_MAX);
    }
    if (r.max_session_memory_mib > SBX_TENANT_SESSION_MEMORY_MAX_MIB) {
        return invalid(error, "max_session_memory_mib", SBX_TENANT_SESSION_MEMORY_MAX_MIB);
    }
    *ret = r;
    return TRUE;
}

static gboolean check_name(const char *what, const char *name, GError **error)
{
    if (sbx_tenant_name_valid(name) && !looks_like_id(name)) {
        return TRUE;
    }
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID,
                "%s name \"%s\": expected 1 to %d of A-Z a-z 0-9 . _ - (and not of the form of a "
                "tenant id, t_ and 16 hex digits)",
                what, name != NULL ? name : "", SBX_TENANT_NAME_MAX);
    return FALSE;
}

static gboolean check_catalogs(char **catalogs, GError **error)
{
    guint n = catalogs != NULL ? g_strv_length(catalogs) : 0;

    if (n > SBX_TENANT_CATALOGS_MAX) {
        return invalid(error, "catalogs", SBX_TENANT_CATALOGS_MAX);
    }
    for (guint i = 0; i < n; i++) {
        if (!check_name("catalog", catalogs[i], error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* @n bytes from the kernel's CSPRNG (blocks only until it is seeded, at boot). */
static gboolean random_bytes(guint8 *buf, gsize n, GError **error)
{
    for (gsize off = 0; off < n;) {
        ssize_t got = getrandom(buf + off, n - off, 0);
        if (got < 0 && errno != EINTR) {
            int e = errno;
            g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "getrandom: %s", g_strerror(e));
            return FALSE;
        }
        off += got > 0 ? (gsize)got : 0;
    }
    return TRUE;
}

static char *key_hash(const char *key)
{
    return g_compute_checksum_for_string(G_CHECKSUM_SHA256, key, -1);
}

/* A new API key in *@ret_key and its SHA-256 (hex) in *@ret_hash. */
static gboolean make_key(char **ret_key, char **ret_hash, GError **error)
{
    guint8 raw[SBX_TENANT_KEY_RANDOM_BYTES];

    if (!random_bytes(raw, sizeof(raw), error)) {
        return FALSE;
    }
    char *b64 = g_base64_encode(raw, sizeof(raw));
    explicit_bzero(raw, sizeof(raw));
    g_strdelimit(b64, "+", '-');
    g_strdelimit(b64, "/", '_');
    *strchrnul(b64, '=') = '\0';
    char *key = g_strconcat(SBX_TENANT_KEY_PREFIX, b64, NULL);
    explicit_bzero(b64, strlen(b64));
    g_free(b64);
    g_assert(strlen(key) == SBX_TENANT_KEY_LEN);
    *ret_hash = key_hash(key);
    *ret_key = key;
    return TRUE;
}

static gboolean make_id(char **ret, GError **error)
{
    guint8 raw[8];
    GString *id = g_string_new("t_");

    if (!random_bytes(raw, sizeof(raw), error)) {
        g_string_free(id, TRUE);
        return FALSE;
    }
    for (gsize i = 0; i < sizeof(raw); i++) {
        g_string_append_printf(id, "%02x", raw[i]);
    }
    *ret = g_string_free(id, FALSE);
    return TRUE;
}

static gboolean insert_catalogs(SbxStore *store, const char *id, char **catalogs, GError **error)
{
    g_autoptr(sqlite3_stmt) del =
        sbx_store_prepare(store, "DELETE FROM tenant_catalogs WHERE tenant_id = ?1", error);
    g_autoptr(sqlite3_stmt) ins = sbx_store_prepare(
        store, "INSERT OR IGNORE INTO tenant_catalogs (tenant_id, catalog) VALUES (?1, ?2)", error);

    if (del == NULL || ins == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(del, 1, id);
    if (!sbx_store_step_done(store, del, error)) {
        return FALSE;
    }
    for (char **c = catalogs; c != NULL && *c != NULL; c++) {
        sqlite3_reset(ins);
        sbx_store_bind_text(ins, 1, id);
        sbx_store_bind_text(ins, 2, *c);
        if (!sbx_store_step_done(store, ins, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean insert_tenant(SbxStore *store, const char *id, const char *name,
                              const SbxTenantQuotas *q, const char *key, const char *hash,
                              GError **error)
{
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store,
                          "INSERT INTO tenants (" TENANT_COLUMNS ", key_hash)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                          error);
    g_autoptr(GError) local = NULL;

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, id);
    sbx_store_bind_text(stmt, 2, name);
    sqlite3_bind_int64(stmt, 3, sbx_store_now_ms());
    sqlite3_bind_text(stmt, 4, key, SBX_TENANT_KEY_SHOWN, SQLITE_TRANSIENT);
    sqlite3_bind_int64(stmt, 5, q->max_concurrent);
    sqlite3_bind_int64(stmt, 6, q->max_per_minute);
    sqlite3_bind_int64(stmt, 7, (gint64)q->max_timeout_ms);
    sqlite3_bind_int64(stmt, 8, (gint64)q->max_output_bytes);
    sqlite3_bind_int64(stmt, 9, q->max_sessions);
    sqlite3_bind_int64(stmt, 10, (gint64)q->max_session_memory_mib);
    sbx_store_bind_text(stmt, 11, hash);
    if (!sbx_store_step_done(store, stmt, &local)) {
        if (g_error_matches(local, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS)) {
            g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS,
                        "a tenant named \"%s\" exists", name);
            return FALSE;
        }
        g_propagate_error(error, g_steal_pointer(&local));
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_tenant_add(SbxStore *store, const char *name, const SbxTenantQuotas *q,
                        char **allowed_catalogs, char **ret_key, GError **error)
{
    SbxTenantQuotas quotas;
    g_autofree char *id = NULL, *key = NULL, *hash = NULL;

    if (!check_name("tenant", name, error) || !sbx_tenant_quotas_resolve(q, &quotas, error) ||
        !check_catalogs(allowed_catalogs, error) || !make_id(&id, error) ||
        !make_key(&key, &hash, error) || !sbx_store_begin(store, error)) {
        return FALSE;
    }
    gboolean ok = insert_tenant(store, id, name, &quotas, key, hash, error) &&
                  insert_catalogs(store, id, allowed_catalogs, error);
    if (!sbx_store_end(store, ok, ok ? error : NULL)) {
        return FALSE;
    }
    *ret_key = g_steal_pointer(&key);
    return TRUE;
}

static gboolean load_catalogs(SbxStore *store, SbxTenant *t, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store, "SELECT catalog FROM tenant_catalogs WHERE tenant_id = ?1 ORDER BY catalog", error);
    g_autoptr(GStrvBuilder) b = g_strv_builder_new();
    int rc;

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, t->id);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        g_strv_builder_add(b, (const char *)sqlite3_column_text(stmt, 0));
    }
    if (rc != SQLITE_DONE) {
        return sbx_store_fail(store, "read catalogs", error);
    }
    t->catalogs = g_strv_builder_end(b);
    return TRUE;
}

/* The tenant of the row @stmt is on (columns TENANT_COLUMNS), with its catalogs. */
static SbxTenant *tenant_from_row(SbxStore *store, sqlite3_stmt *stmt, GError **error)
{
    g_autoptr(SbxTenant) t = g_new0(SbxTenant, 1);

    t->id = sbx_store_column_text(stmt, 0);
    t->name = sbx_store_column_text(stmt, 1);
    t->created_at_ms = sqlite3_column_int64(stmt, 2);
    t->key_prefix = sbx_store_column_text(stmt, 3);
    t->quotas.max_concurrent = (guint)sqlite3_column_int64(stmt, 4);
    t->quotas.max_per_minute = (guint)sqlite3_column_int64(stmt, 5);
    t->quotas.max_timeout_ms = (guint64)sqlite3_column_int64(stmt, 6);
    t->quotas.max_output_bytes = (guint64)sqlite3_column_int64(stmt, 7);
    t->quotas.max_sessions = (guint)sqlite3_column_int64(stmt, 8);
    t->quotas.max_session_memory_mib = (guint64)sqlite3_column_int64(stmt, 9);
    return load_catalogs(store, t, error) ? g_steal_pointer(&t) : NULL;
}

/* The one tenant @stmt selects (bound already); NOT_FOUND naming @what if none. */
static gboolean select_one(SbxStore *store, sqlite3_stmt *stmt, const char *what, SbxTenant **ret,
                           GError **error)
{
    int rc = sqlite3_step(stmt);

    if (rc == SQLITE_DONE) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND, "no tenant \"%s\"", what);
        return FALSE;
    }
    if (rc != SQLITE_ROW) {
        return sbx_store_fail(store, "read a tenant", error);
    }
    SbxTenant *t = tenant_from_row(store, stmt, error);
    if (t == NULL) {
        return FALSE;
    }
    *ret = t;
    return TRUE;
}

gboolean sbx_tenant_get(SbxStore *store, const char *name_or_id, SbxTenant **ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store, "SELECT " TENANT_COLUMNS " FROM tenants WHERE name = ?1 OR id = ?1", error);

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, name_or_id);
    return select_one(store, stmt, name_or_id, ret, error);
}

/* Whether @bearer has the form of an API key: checked before anything is hashed or looked up. */
static gboolean key_well_formed(const char *bearer)
{
    if (bearer == NULL || strnlen(bearer, SBX_TENANT_KEY_LEN + 1) != SBX_TENANT_KEY_LEN ||
        strncmp(bearer, SBX_TENANT_KEY_PREFIX, strlen(SBX_TENANT_KEY_PREFIX)) != 0) {
        return FALSE;
    }
    for (const char *p = bearer + strlen(SBX_TENANT_KEY_PREFIX); *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_') {
            return FALSE;
        }
    }
    return TRUE;
}

/* Equal strings of @len bytes, in time that does not depend on where they differ. */
static gboolean equal_const_time(const char *a, const char *b, gsize len)
{
    guint8 diff = 0;

    for (gsize i = 0; i < len; i++) {
        diff |= (guint8)a[i] ^ (guint8)b[i];
    }
    return diff == 0;
}

gboolean sbx_tenant_authenticate(SbxStore *store, const char *bearer, SbxTenant **ret,
                                 GError **error)
{
    g_autoptr(GError) local = NULL;

    if (!key_well_formed(bearer)) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_AUTH, "unknown API key");
        return FALSE;
    }
    g_autofree char *hash = key_hash(bearer);
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store, "SELECT " TENANT_COLUMNS ", key_hash FROM tenants WHERE key_hash = ?1", error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, hash);
    g_autoptr(SbxTenant) t = NULL;
    if (!select_one(store, stmt, "", &t, &local)) {
        if (!g_error_matches(local, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND)) {
            g_propagate_error(error, g_steal_pointer(&local));
            return FALSE;
        }
    }
    /* The look-up went by hash; compare once more in constant time, as a check of that. */
    const char *stored = t != NULL ? (const char *)sqlite3_column_text(stmt, 10) : NULL;
    if (stored == NULL || strlen(stored) != strlen(hash) ||
        !equal_const_time(stored, hash, strlen(hash))) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_AUTH, "unknown API key");
        return FALSE;
    }
    *ret = g_steal_pointer(&t);
    return TRUE;
}

gboolean sbx_tenant_list(SbxStore *store, GPtrArray **ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store, "SELECT " TENANT_COLUMNS " FROM tenants ORDER BY name", error);
    g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_tenant_free);
    int rc;

    if (stmt == NULL) {
        return FALSE;
    }
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        SbxTenant *t = tenant_from_row(store, stmt, error);
        if (t == NULL) {
            return FALSE;
        }
        g_ptr_array_add(list, t);
    }
    if (rc != SQLITE_DONE) {
        return sbx_store_fail(store, "list tenants", error);
    }
    *ret = g_steal_pointer(&list);
    return TRUE;
}

/*
 * Run @sql, one statement whose ?1 is the id of tenant @name_or_id, ?2 and ?3 @a and @b (if not
 * NULL).
 */
static gboolean update_tenant(SbxStore *store, const char *name_or_id, const char *sql,
                              const char *a, const char *b, GError **error)
{
    g_autoptr(SbxTenant) t = NULL;

    if (!sbx_tenant_get(store, name_or_id, &t, error)) {
        return FALSE;
    }
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, sql, error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, t->id);
    if (a != NULL) {
        sbx_store_bind_text(stmt, 2, a);
    }
    if (b != NULL) {
        sbx_store_bind_text(stmt, 3, b);
    }
    if (!sbx_store_step_done(store, stmt, error)) {
        return FALSE;
    }
    if (sqlite3_changes(store->db) == 0) { /* removed since the look-up */
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND, "no tenant \"%s\"",
                    name_or_id);
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_tenant_remove(SbxStore *store, const char *name_or_id, GError **error)
{
    return update_tenant(store, name_or_id, "DELETE FROM tenants WHERE id = ?1", NULL, NULL, error);
}

gboolean sbx_tenant_rotate_key(SbxStore *store, const char *name_or_id, char **ret_key,
                               GError **error)
{
    g_autofree char *key = NULL, *hash = NULL;

    if (!make_key(&key, &hash, error)) {
        return FALSE;
    }
    g_autofree char *shown = g_strndup(key, SBX_TENANT_KEY_SHOWN);
    /* One statement: the old hash is gone in the same write the new one arrives with. */
    if (!update_tenant(store, name_or_id,
                       "UPDATE tenants SET key_hash = ?2, key_prefix = ?3 WHERE id = ?1", hash,
                       shown, error)) {
        return FALSE;
    }
    *ret_key = g_steal_pointer(&key);
    return TRUE;
}

gboolean sbx_tenant_set_quotas(SbxStore *store, const char *name_or_id, const SbxTenantQuotas *q,
                               GError **error)
{
    SbxTenantQuotas r;
    g_autoptr(SbxTenant) t = NULL;

    if (!sbx_tenant_quotas_resolve(q, &r, error) || !sbx_tenant_get(store, name_or_id, &t, error)) {
        return FALSE;
    }
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store,
                          "UPDATE tenants SET max_concurrent = ?2, max_per_minute = ?3,"
                          " max_timeout_ms = ?4, max_output_bytes = ?5, max_sessions = ?6,"
                          " max_session_memory_mib = ?7 WHERE id = ?1",
                          error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, t->id);
    sqlite3_bind_int64(stmt, 2, r.max_concurrent);
    sqlite3_bind_int64(stmt, 3, r.max_per_minute);
    sqlite3_bind_int64(stmt, 4, (gint64)r.max_timeout_ms);
    sqlite3_bind_int64(stmt, 5, (gint64)r.max_output_bytes);
    sqlite3_bind_int64(stmt, 6, r.max_sessions);
    sqlite3_bind_int64(stmt, 7, (gint64)r.max_session_memory_mib);
    return sbx_store_step_done(store, stmt, error);
}

gboolean sbx_tenant_set_catalogs(SbxStore *store, const char *name_or_id, char **catalogs,
                                 GError **error)
{
    g_autoptr(SbxTenant) t = NULL;

    if (!check_catalogs(catalogs, error) || !sbx_tenant_get(store, name_or_id, &t, error) ||
        !sbx_store_begin(store, error)) {
        return FALSE;
    }
    gboolean ok = insert_catalogs(store, t->id, catalogs, error);
    return sbx_store_end(store, ok, ok ? error : NULL);
}

char *sbx_tenant_to_json(const SbxTenant *t)
{
    GString *out = g_string_new("{\"id\":");

    sbx_store_json_str(out, t->id);
    g_string_append(out, ",\"name\":");
    sbx_store_json_str(out, t->name);
    g_string_append_printf(
        out, ",\"created_at\":%" G_GINT64_FORMAT ",\"key_prefix\":", t->created_at_ms);
    sbx_store_json_str(out, t->key_prefix);
    g_string_append_printf(out,
                           ",\"quotas\":{\"max_concurrent\":%u,\"max_per_minute\":%u,"
                           "\"max_timeout_ms\":%" G_GUINT64_FORMAT
                           ",\"max_output_bytes\":%" G_GUINT64_FORMAT ",\"max_sessions\":%u,"
                           "\"max_session_memory_mib\":%" G_GUINT64_FORMAT "},\"catalogs\":[",
                           t->quotas.max_concurrent, t->quotas.max_per_minute,
                           t->quotas.max_timeout_ms, t->quotas.max_output_bytes,
                           t->quotas.max_sessions, t->quotas.max_session_memory_mib);
    for (char **c = t->catalogs; c != NULL && *c != NULL; c++) {
        g_string_append(out, c == t->catalogs ? "" : ",");
        sbx_store_json_str(out, *c);
    }
    g_string_append(out, "]}");
    return g_string_free(out, FALSE);
}
