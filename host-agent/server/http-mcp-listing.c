/*
 * The catalogs of `/mcp?catalog=NAME` listed for the discovery tools (docs/mcp-server.md, "Over
 * HTTP"): the operator's catalog NAME with its MCP providers' tools asked (their servers started
 * once and kept, idle, for as long as a session uses the listing), shared by every MCP session
 * that names it. A catalog file changed since it was listed is listed again for the sessions
 * that come after; the old listing goes with its last session. Listings are made only for the
 * catalogs of the operator's directory that a tenant may name, one per file version in use.
 */
#include "server/http-private.h"

#include <string.h>
#include <sys/stat.h>

typedef struct {
    SbxHttpListingFunc func;
    gpointer data;
} Waiter;

struct SbxHttpListing {
    HttpFront *front;
    char *name;
    gint64 mtime_us; /* of its file when listed */
    SbxTools *tools;
    gboolean ready;
    char *failure;   /* why its tools could not be listed, or NULL */
    guint refs;      /* the sessions that use it, and the front while it is the current one */
    GArray *waiters; /* Waiter */
};

static void listing_free(SbxHttpListing *l)
{
    sbx_tools_free(l->tools); /* its ready never comes after this */
    g_array_unref(l->waiters);
    g_free(l->failure);
    g_free(l->name);
    g_free(l);
}

void sbx_http_listing_unref(SbxHttpListing *l)
{
    if (l != NULL && --l->refs == 0) {
        listing_free(l);
    }
}

static void on_listed(SbxTools *tools, const GError *error, gpointer data)
{
    SbxHttpListing *l = data;
    (void)tools;

    l->ready = TRUE;
    if (error != NULL) {
        l->failure = g_strdup(error->message);
        g_message("http: catalog %s: its tools could not be listed for /mcp: %s", l->name,
                  error->message);
    }
    l->refs++; /* a waiter may drop the last other reference */
    while (l->waiters->len > 0) {
        Waiter w = g_array_index(l->waiters, Waiter, 0);
        g_array_remove_index(l->waiters, 0);
        w.func(w.data);
    }
    sbx_http_listing_unref(l);
}

static gint64 file_mtime_us(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0
               ? (gint64)st.st_mtim.tv_sec * G_USEC_PER_SEC + st.st_mtim.tv_nsec / 1000
               : -1;
}

SbxHttpListing *sbx_http_listing_get(HttpFront *front, const char *name, GError **error)
{
    g_autofree char *file = g_strdup_printf("%s.json", name);
    g_autofree char *path = front->catalogs_dir != NULL && sbx_tenant_name_valid(name)
                                ? g_build_filename(front->catalogs_dir, file, NULL)
                                : NULL;
    gint64 mtime = path != NULL ? file_mtime_us(path) : -1;
    SbxHttpListing *l = g_hash_table_lookup(front->mcp_listings, name);

    if (l != NULL && l->mtime_us == mtime) {
        l->refs++;
        return l;
    }
    if (path == NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                    "catalog %s cannot be used: no catalogs on this server", name);
        return NULL;
    }
    SbxCatalog *catalog = sbx_catalog_load(path, error);
    SbxTools *tools = catalog != NULL ? sbx_tools_new_listing(catalog, error) : NULL;
    if (tools == NULL) {
        g_prefix_error(error, "catalog %s cannot be used: ", name);
        return NULL;
    }
    l = g_new0(SbxHttpListing, 1);
    l->front = front;
    l->name = g_strdup(name);
    l->mtime_us = mtime;
    l->tools = tools;
    l->waiters = g_array_new(FALSE, FALSE, sizeof(Waiter));
    l->refs = 2; /* the caller's, and the front's as the current listing of @name */
    g_hash_table_replace(front->mcp_listings, l->name, l); /* the old one: its front ref goes */
    sbx_tools_start(tools, on_listed, l);
    return l;
}

gboolean sbx_http_listing_ready(const SbxHttpListing *l)
{
    return l->ready;
}

const SbxCatalog *sbx_http_listing_catalog(const SbxHttpListing *l)
{
    return l->ready && l->failure == NULL ? sbx_tools_catalog(l->tools) : NULL;
}

void sbx_http_listing_wait(SbxHttpListing *l, SbxHttpListingFunc func, gpointer data)
{
    Waiter w = {.func = func, .data = data};

    g_array_append_val(l->waiters, w);
}

void sbx_http_listing_unwait(SbxHttpListing *l, gpointer data)
{
    for (guint i = 0; i < l->waiters->len; i++) {
        if (g_array_index(l->waiters, Waiter, i).data == data) {
            g_array_remove_index(l->waiters, i);
            return;
        }
    }
}

void sbx_http_listings_init(HttpFront *front)
{
    front->mcp_listings = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                                (GDestroyNotify)sbx_http_listing_unref);
}

void sbx_http_listings_free(HttpFront *front)
{
    g_clear_pointer(&front->mcp_listings, g_hash_table_destroy);
}
