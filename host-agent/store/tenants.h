/*
 * Tenants (docs/service.md, "Tenants and API keys"): who may use `sandbox serve`'s API, with
 * which quotas and catalogs. An API key is shown once, when made; the store keeps its SHA-256.
 */
#pragma once

#include "db.h"

/* Names: 1 to 64 of [A-Za-z0-9._-] (the same rule for catalog names): safe in a terminal, a
 * log line, a URL path and a file name without quoting; 64 is longer than any name a person
 * types. */
#define SBX_TENANT_NAME_MAX 64

/* Catalogs one tenant may name: far more than an operator configures; bounds the row count. */
#define SBX_TENANT_CATALOGS_MAX 64

/*
 * An API key: "sbx_" and 43 characters of base64url without padding (32 random bytes: 256
 * bits, no dictionary to try, so one SHA-256 of it is as good as a slow password hash).
 */
#define SBX_TENANT_KEY_PREFIX "sbx_"
#define SBX_TENANT_KEY_RANDOM_BYTES 32
#define SBX_TENANT_KEY_LEN 47
/* The key's first characters kept in the clear, so an operator can tell keys apart (36 bits of
 * the 256: the rest still cannot be guessed). */
#define SBX_TENANT_KEY_SHOWN 10

/* Quota defaults and the largest value an operator may set, each with its reason. */
/* Executions at once: each is a VM (~100-150 MiB); 2 keeps one tenant from a host's pool. */
#define SBX_TENANT_CONCURRENT_DEFAULT 2
/* 64 VMs is beyond what one host of this kind runs at all. */
#define SBX_TENANT_CONCURRENT_MAX 64
/* Executions started per minute: one a second on average, bursts within max_concurrent. */
#define SBX_TENANT_PER_MINUTE_DEFAULT 60
/* 100 a second: beyond how fast one host restores VMs; a bound on the counter, not a target. */
#define SBX_TENANT_PER_MINUTE_MAX 6000
/* The longest timeout a tenant may ask for: 5 minutes, a generous script. */
#define SBX_TENANT_TIMEOUT_DEFAULT_MS (5 * 60 * 1000)
/* A day, as `sandbox run --timeout` allows. */
#define SBX_TENANT_TIMEOUT_MAX_MS (24 * 60 * 60 * 1000)
/* Output of one execution: the session's default output limit (10 MiB). */
#define SBX_TENANT_OUTPUT_DEFAULT (10ull * 1024 * 1024)
/* 1 GiB, as `sandbox run --output-limit` allows. */
#define SBX_TENANT_OUTPUT_MAX (1024ull * 1024 * 1024)
/* Sessions open at once: each holds a VM for as long as it is open, idle included (executions
 * hold theirs for one run); 2 gives a tenant a notebook and a spare without holding a host's
 * VMs. */
#define SBX_TENANT_SESSIONS_DEFAULT 2
/* As executions at once: 64 VMs is beyond what one host of this kind runs. */
#define SBX_TENANT_SESSIONS_MAX 64
/* Memory of a tenant's open sessions' VMs together, MiB: 1 GiB lets the default 2 sessions
 * have VMs of up to 512 MiB each (the shipped profiles have 256), so by default the count binds
 * first; a tenant with larger VMs gets a larger bound from the operator. */
#define SBX_TENANT_SESSION_MEMORY_DEFAULT_MIB 1024
/* The most sessions (64) of the largest VM a profile may have (16384 MiB, qemu-profiles/
 * README.md): 1 TiB, so this bound never binds before those do. */
#define SBX_TENANT_SESSION_MEMORY_MAX_MIB (64ull * 16384)

/* Per-tenant quotas (over one: the API answers 429). 0 in a field given to the store: its
 * default. The store keeps them; the server and the session manager enforce them. */
typedef struct {
    guint max_concurrent;
    guint max_per_minute;
    guint64 max_timeout_ms;
    guint64 max_output_bytes;
    guint max_sessions;             /* sessions open at once */
    guint64 max_session_memory_mib; /* the memory of its open sessions' VMs together, MiB */
} SbxTenantQuotas;

typedef struct {
    char *id;   /* "t_" and 16 hex digits */
    char *name; /* unique */
    gint64 created_at_ms;
    char *key_prefix; /* the key's first SBX_TENANT_KEY_SHOWN characters */
    SbxTenantQuotas quotas;
    char **catalogs; /* the catalogs it may name, sorted, NULL-terminated (maybe empty) */
} SbxTenant;

/** Free @tenant (NULL: nothing). */
void sbx_tenant_free(SbxTenant *tenant);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxTenant, sbx_tenant_free)

/** Whether @name is a valid tenant (or catalog) name: 1..64 of [A-Za-z0-9._-]. */
gboolean sbx_tenant_name_valid(const char *name);

/**
 * @q with each 0 field replaced by its default (@q NULL: all defaults), checked against the
 * maxima (SBX_STORE_ERROR_INVALID names the field).
 */
gboolean sbx_tenant_quotas_resolve(const SbxTenantQuotas *q, SbxTenantQuotas *ret, GError **error);

/**
 * Add tenant @name with quotas @q (NULL or 0 fields: defaults) and the catalogs it may name
 * (@allowed_catalogs, NULL-terminated; NULL: none). *@ret_key: its API key, a new string, the
 * only time it is ever available. SBX_STORE_ERROR_EXISTS if the name is taken.
 */
gboolean sbx_tenant_add(SbxStore *store, const char *name, const SbxTenantQuotas *q,
                        char **allowed_catalogs, char **ret_key, GError **error);

/**
 * The tenant whose API key is @bearer (the token of an `Authorization: Bearer` header, without
 * the word). Any failure is SBX_STORE_ERROR_AUTH, saying nothing of why (SBX_STORE_ERROR_DB if
 * the database failed).
 */
gboolean sbx_tenant_authenticate(SbxStore *store, const char *bearer, SbxTenant **ret,
                                 GError **error);

/** The tenant named or with id @name_or_id. SBX_STORE_ERROR_NOT_FOUND if none. */
gboolean sbx_tenant_get(SbxStore *store, const char *name_or_id, SbxTenant **ret, GError **error);

/** Every tenant (SbxTenant *, owned by the array), by name. */
gboolean sbx_tenant_list(SbxStore *store, GPtrArray **ret, GError **error);

/** Remove tenant @name_or_id (its key stops working; its execution records stay). */
gboolean sbx_tenant_remove(SbxStore *store, const char *name_or_id, GError **error);

/** A new API key for @name_or_id in *@ret_key (shown once); the old one stops working. */
gboolean sbx_tenant_rotate_key(SbxStore *store, const char *name_or_id, char **ret_key,
                               GError **error);

/** Replace the quotas of @name_or_id (0 fields: defaults). */
gboolean sbx_tenant_set_quotas(SbxStore *store, const char *name_or_id, const SbxTenantQuotas *q,
                               GError **error);

/** Replace the catalogs @name_or_id may name (NULL-terminated; NULL: none). */
gboolean sbx_tenant_set_catalogs(SbxStore *store, const char *name_or_id, char **catalogs,
                                 GError **error);

/**
 * @tenant as a JSON object (id, name, created_at, key_prefix, quotas: max_concurrent,
 * max_per_minute, max_timeout_ms, max_output_bytes, max_sessions, max_session_memory_mib;
 * catalogs), a new string.
 */
char *sbx_tenant_to_json(const SbxTenant *tenant);
