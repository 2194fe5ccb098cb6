/*
 * The http provider: the catalog's http fields and their errors, URL templates, query and body
 * from the input, `${secret:NAME}` from the environment and from the secrets file (refused
 * when others may read it), and real calls against a SoupServer on 127.0.0.1 in this process:
 * the secret header arrives, 2xx JSON, 204, non-2xx, non-JSON, an answer over 1 MiB, redirects
 * (same origin followed, another origin refused, too many), the per-call timeout, cancellation.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <libsoup/soup.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog-http.h"
#include "catalog.h"
#include "provider.h"
#include "secrets.h"
#include "tools-error.h"

static SbxCatalog *parse(const char *json, GError **error)
{
    return sbx_catalog_parse(json, strlen(json), "cat.json", "/base", error);
}

static void expect_catalog_error(const char *tool, const char *message)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *json = g_strdup_printf(
        "{\"providers\": {\"api\": {\"kind\": \"http\", \"tools\": {\"t\": %s}}}}", tool);
    g_autoptr(SbxCatalog) cat = parse(json, &error);
    assert_null(cat);
    if (strstr(error->message, message) == NULL) {
        fail_msg("expected \"%s\" in \"%s\"", message, error->message);
    }
}

static void test_catalog(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat =
        parse("{\"providers\": {\"api\": {\"kind\": \"http\", \"timeout_ms\": 500, \"headers\": "
              "{\"Authorization\": \"Bearer ${secret:TOK}\"}, \"tools\": {"
              "\"get\": {\"url\": \"https://api.example.com/r/{owner}/{repo}?x=1\"},"
              "\"put\": {\"method\": \"PUT\", \"url\": \"http://h:8080/a\", \"headers\": "
              "{\"X-A\": \"b\"}}}}}}",
              &error);
    assert_non_null(cat);
    const SbxCatalogProvider *p = &cat->providers[0];
    assert_int_equal(p->kind, SBX_PROVIDER_HTTP);
    assert_int_equal(p->http->n_headers, 1);
    assert_string_equal(p->http->header_values[0], "Bearer ${secret:TOK}");
    assert_string_equal(p->tools[0].http->method, "GET");
    assert_string_equal(p->tools[1].http->method, "PUT");
    assert_string_equal(p->tools[1].http->header_names[0], "X-A");
    assert_false(p->tools[0].destructive);

    expect_catalog_error("{}", "providers.api.tools.t: missing field \"url\"");
    expect_catalog_error("{\"url\": \"ftp://h/x\"}", "only http:// and https://");
    expect_catalog_error("{\"url\": \"http://{host}/x\"}", "no placeholder in the scheme or host");
    expect_catalog_error("{\"url\": \"http://h/{a b}\"}", "a placeholder is {name}");
    expect_catalog_error("{\"url\": \"http://h/a}\"}", "without its `{`");
    expect_catalog_error("{\"url\": \"http://h/a#f\"}", "no fragment");
    expect_catalog_error("{\"url\": \"http://h/x\", \"method\": \"HEAD\"}", "method: expected one");
    expect_catalog_error("{\"url\": \"http://h/x\", \"command\": []}", "unknown field \"command\"");
    expect_catalog_error("{\"url\": \"http://h/x\", \"headers\": {\"Host\": \"x\"}}",
                         "headers.Host: not a header name");
    expect_catalog_error("{\"url\": \"http://h/x\", \"headers\": {\"X\": \"a\\nb\"}}",
                         "control characters");
    expect_catalog_error("{\"url\": \"http://h/x\", \"headers\": {\"X\": \"${env:A}\"}}",
                         "starts a secret reference");
    expect_catalog_error("{\"url\": \"http://h/${secret:A}\"}", "a placeholder is {name}");
}

static char *build(const char *method, const char *url, const char *input, char **body,
                   GError **error)
{
    SbxHttpEndpoint ep = {.method = (char *)method, .url = (char *)url};
    char *out = NULL;
    g_clear_pointer(body, g_free);
    return sbx_http_build_request(&ep, input, &out, body, error) ? out : NULL;
}

static void test_build_request(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autofree char *body = NULL;
    g_autofree char *url = build("GET", "http://h/r/{owner}/{repo}",
                                 "{\"owner\":\"a b/c?d\",\"repo\":3,\"q\":\"x&y=z\",\"n\":null,"
                                 "\"t\":[1,\"two\",true],\"o\":{\"k\":1},\"b\":false}",
                                 &body, &error);
    assert_non_null(url);
    assert_string_equal(url, "http://h/r/a%20b%2Fc%3Fd/3?q=x%26y%3Dz&t=1&t=two&t=true&"
                             "o=%7B%22k%22%3A1%7D&b=false");
    assert_null(body);

    g_free(url);
    url = build("DELETE", "http://h/x?fixed=1", "{\"a\":\"1\"}", &body, &error);
    assert_string_equal(url, "http://h/x?fixed=1&a=1");

    g_free(url);
    url = build("POST", "http://h/items/{id}", "{\"id\":\"é\",\"name\":\"n\",\"v\":[1]}", &body,
                &error);
    assert_string_equal(url, "http://h/items/%C3%A9");
    assert_string_equal(body, "{\"name\":\"n\",\"v\":[1]}");

    g_clear_pointer(&body, g_free);
    g_free(url);
    url = build("PATCH", "http://h/i/{id}", "{\"id\":1}", &body, &error);
    assert_string_equal(body, "{}");

    g_free(url);
    url = build("GET", "http://h/x", "{\"n\":null}", &body, &error);
    assert_string_equal(url, "http://h/x"); /* only nulls: no `?` */

    const char *bad[][2] = {
        {"[1]", "input: expected an object"},
        {"{}", "input: missing property \"id\""},
        {"{\"id\":null}", "input[\"id\"]: expected a non-empty string"},
        {"{\"id\":\"\"}", "input[\"id\"]: expected a non-empty string"},
        {"{\"id\":{}}", "input[\"id\"]: expected a non-empty string"},
        {"{\"id\":\"..\"}", "cannot go in the URL"},
        {"{\"id\":\".\"}", "cannot go in the URL"},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_clear_error(&error);
        g_clear_pointer(&body, g_free);
        g_autofree char *u = build("GET", "http://h/{id}", bad[i][0], &body, &error);
        assert_null(u);
        assert_true(g_error_matches(error, SBX_TOOL_ERROR, SBX_ERR_VALIDATION));
        if (strstr(error->message, bad[i][1]) == NULL) {
            fail_msg("%s: expected \"%s\" in \"%s\"", bad[i][0], bad[i][1], error->message);
        }
    }
    /* A GET whose query would be huge is refused, not sent. */
    g_autofree char *big = g_strnfill(70000, 'a');
    g_autofree char *in = g_strdup_printf("{\"q\":\"%s\"}", big);
    g_clear_error(&error);
    g_autofree char *u = build("GET", "http://h/x", in, &body, &error);
    assert_null(u);
    assert_non_null(strstr(error->message, "longer than"));
}

static char *fake_lookup(const char *name, gpointer data, GError **error)
{
    (void)data;
    if (strcmp(name, "A") == 0) {
        return g_strdup("alpha");
    }
    g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID, "secret %s is not set", name);
    return NULL;
}

static void test_expand_secrets(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autofree char *v =
        sbx_http_expand_secrets("Bearer ${secret:A}/${secret:A}!", fake_lookup, NULL, &error);
    assert_string_equal(v, "Bearer alpha/alpha!");
    g_autofree char *plain = sbx_http_expand_secrets("no secret $ {x}", fake_lookup, NULL, &error);
    assert_string_equal(plain, "no secret $ {x}");
    g_autofree char *missing = sbx_http_expand_secrets("${secret:B}", fake_lookup, NULL, &error);
    assert_null(missing);
    assert_non_null(strstr(error->message, "secret B"));
}

static void test_secret_sources(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_dir_make_tmp("sbx-secrets-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "secrets", NULL);

    g_setenv("SANDBOX_SECRETS_FILE", path, TRUE);
    g_setenv("SANDBOX_SECRET_FROM_ENV", "env-value", TRUE);
    g_autofree char *e = sbx_secret_lookup("FROM_ENV", NULL, &error);
    assert_string_equal(e, "env-value");

    /* No file: a clear error naming both sources, never a value. */
    g_autofree char *none = sbx_secret_lookup("TOKEN", NULL, &error);
    assert_null(none);
    assert_non_null(strstr(error->message, "SANDBOX_SECRET_TOKEN"));
    g_clear_error(&error);

    assert_true(g_file_set_contents(path, "# comment\nOTHER=x\nTOKEN=file-value\r\n", -1, NULL));
    chmod(path, 0600);
    g_autofree char *f = sbx_secret_lookup("TOKEN", NULL, &error);
    assert_string_equal(f, "file-value");

    chmod(path, 0644); /* others may read it: refused */
    g_autofree char *refused = sbx_secret_lookup("TOKEN", NULL, &error);
    assert_null(refused);
    assert_non_null(strstr(error->message, "refusing the secrets file"));
    assert_null(strstr(error->message, "file-value"));
    g_clear_error(&error);

    g_setenv("SANDBOX_SECRET_BAD", "a\r\nX-Injected: 1", TRUE);
    g_autofree char *bad = sbx_secret_lookup("BAD", NULL, &error);
    assert_null(bad);
    assert_null(strstr(error->message, "Injected"));
    g_clear_error(&error);

    /* A FIFO in its place: refused, not waited on (open would block until a writer came). */
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    g_autofree char *fifo = sbx_secret_lookup("TOKEN", NULL, &error);
    assert_null(fifo);
    assert_non_null(strstr(error->message, "refusing the secrets file"));
    g_clear_error(&error);

    unlink(path);
    rmdir(dir);
    g_unsetenv("SANDBOX_SECRETS_FILE");
}

/* ---- calls against a SoupServer in this process ------------------------------------- */

static SoupServer *server;
static guint port;
static char *seen_auth;

static void handler(SoupServer *srv, SoupServerMessage *msg, const char *path, GHashTable *query,
                    gpointer data)
{
    (void)srv, (void)query, (void)data;
    SoupMessageHeaders *req = soup_server_message_get_request_headers(msg);
    g_free(seen_auth);
    seen_auth = g_strdup(soup_message_headers_get_one(req, "Authorization"));
    if (strcmp(path, "/ok") == 0) {
        soup_server_message_set_status(msg, 200, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY,
                                         "{ \"a\" : [1, 2] }\n", 17);
    } else if (strcmp(path, "/empty") == 0) {
        soup_server_message_set_status(msg, 204, NULL);
    } else if (strcmp(path, "/echo") == 0) {
        /* A server that quotes the token in its error: the excerpt must not show it. */
        g_autofree char *b = g_strdup_printf("{\"error\":\"bad token %s\"}", seen_auth);
        soup_server_message_set_status(msg, 403, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY, b, strlen(b));
    } else if (strcmp(path, "/straddle") == 0) {
        /* The token quoted across the excerpt's 1024-byte cut ("Bearer " ends at 1020). */
        g_autofree char *pad = g_strnfill(1013, 'x');
        g_autofree char *b = g_strdup_printf("%s%s", pad, seen_auth);
        soup_server_message_set_status(msg, 403, NULL);
        soup_server_message_set_response(msg, "text/plain", SOUP_MEMORY_COPY, b, strlen(b));
    } else if (strcmp(path, "/text") == 0) {
        soup_server_message_set_status(msg, 200, NULL);
        soup_server_message_set_response(msg, "text/html", SOUP_MEMORY_COPY, "<html>", 6);
    } else if (strcmp(path, "/trailing") == 0) {
        soup_server_message_set_status(msg, 200, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY, "{} {}", 5);
    } else if (strcmp(path, "/huge") == 0) {
        gsize n = SBX_TOOL_RESULT_MAX + 10;
        char *b = g_malloc(n);
        memset(b, ' ', n);
        b[0] = '"';
        b[n - 1] = '"';
        soup_server_message_set_status(msg, 200, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, b, n);
    } else if (strcmp(path, "/huge-error") == 0) {
        gsize n = 2 * SBX_TOOL_RESULT_MAX;
        char *b = g_malloc(n);
        memset(b, 'e', n);
        soup_server_message_set_status(msg, 500, NULL);
        soup_server_message_set_response(msg, "text/plain", SOUP_MEMORY_TAKE, b, n);
    } else if (strcmp(path, "/redirect") == 0) {
        soup_server_message_set_redirect(msg, 302, "/ok");
    } else if (strcmp(path, "/away") == 0) {
        soup_server_message_set_redirect(msg, 302, "http://localhost:1/ok");
    } else if (strcmp(path, "/hostless") == 0) {
        soup_server_message_set_redirect(msg, 302, "http:/ok");
    } else if (strcmp(path, "/loop") == 0) {
        soup_server_message_set_redirect(msg, 307, "/loop");
    } else if (strcmp(path, "/slow") == 0) {
        soup_server_message_pause(msg); /* never answered */
    } else {
        soup_server_message_set_status(msg, 404, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY,
                                         "{\"error\":\"nope\"}", 16);
    }
}

static int setup_server(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    server = soup_server_new(NULL, NULL);
    soup_server_add_handler(server, NULL, handler, NULL, NULL);
    assert_true(soup_server_listen_local(server, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &error));
    GSList *uris = soup_server_get_uris(server);
    port = g_uri_get_port(uris->data);
    g_slist_free_full(uris, (GDestroyNotify)g_uri_unref);
    g_setenv("SANDBOX_SECRET_TEST_TOKEN", "sekrit-123", TRUE);
    g_setenv("SANDBOX_SECRETS_FILE", "/nonexistent/secrets", TRUE);
    return 0;
}

static int teardown_server(void **state)
{
    (void)state;
    g_clear_object(&server);
    g_clear_pointer(&seen_auth, g_free);
    return 0;
}

static SbxCatalog *api_catalog(guint timeout_ms)
{
    g_autoptr(GError) error = NULL;
    const char *paths[] = {"ok",   "empty",      "echo",     "text",     "trailing",
                           "huge", "huge-error", "redirect", "hostless", "away",
                           "loop", "slow",       "missing",  "straddle"};
    g_autoptr(GString) json = g_string_new(NULL);
    g_string_printf(json,
                    "{\"providers\": {\"api\": {\"kind\": \"http\", \"timeout_ms\": %u, "
                    "\"headers\": {\"Authorization\": \"Bearer ${secret:TEST_TOKEN}\"}, "
                    "\"tools\": {",
                    timeout_ms);
    for (gsize i = 0; i < G_N_ELEMENTS(paths); i++) {
        g_string_append_printf(json, "%s\"%s\": {\"url\": \"http://127.0.0.1:%u/%s\"}",
                               i > 0 ? "," : "", paths[i], port, paths[i]);
    }
    g_string_append(json, "}}}}");
    SbxCatalog *cat = parse(json->str, &error);
    assert_non_null(cat);
    return cat;
}

typedef struct {
    gboolean done;
    char *result;
    GError *error;
} Call;

static void wait_call(Call *c)
{
    while (!c->done) {
        g_main_context_iteration(NULL, TRUE);
    }
}

/* The provider of the call in progress (the callback finishes through it). */
static SbxProvider *current;

static void on_done_p(GObject *src, GAsyncResult *res, gpointer data)
{
    (void)src;
    Call *c = data;
    c->result = sbx_provider_call_finish(current, res, &c->error);
    c->done = TRUE;
}

static void run_call(SbxProvider *p, const char *tool, GCancellable *cancel, Call *c)
{
    memset(c, 0, sizeof(*c));
    current = p;
    sbx_provider_call_async(p, tool, "{}", cancel, on_done_p, c);
    wait_call(c);
}

static void expect_tool_error(SbxProvider *p, const char *tool, const char *message)
{
    Call c;
    run_call(p, tool, NULL, &c);
    assert_null(c.result);
    assert_true(g_error_matches(c.error, SBX_TOOL_ERROR, SBX_ERR_TOOL));
    if (strstr(c.error->message, message) == NULL) {
        fail_msg("%s: expected \"%s\" in \"%s\"", tool, message, c.error->message);
    }
    assert_null(strstr(c.error->message, "sekrit-123"));
    g_error_free(c.error);
}

static void test_calls(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = api_catalog(10000);
    SbxProvider *p = sbx_provider_new(&cat->providers[0], &error);
    assert_non_null(p);
    Call c;

    run_call(p, "ok", NULL, &c);
    assert_string_equal(c.result, "{\"a\":[1,2]}");
    assert_string_equal(seen_auth, "Bearer sekrit-123");
    g_free(c.result);
    run_call(p, "empty", NULL, &c);
    assert_string_equal(c.result, "null");
    g_free(c.result);
    run_call(p, "redirect", NULL, &c); /* same origin: followed, headers kept */
    assert_string_equal(c.result, "{\"a\":[1,2]}");
    assert_string_equal(seen_auth, "Bearer sekrit-123");
    g_free(c.result);

    expect_tool_error(p, "missing", "HTTP 404 Not Found: {\"error\":\"nope\"}");
    expect_tool_error(p, "echo", "HTTP 403 Forbidden: {\"error\":\"bad token Bearer [secret]\"}");
    expect_tool_error(p, "text", "not JSON (Content-Type: text/html)");
    expect_tool_error(p, "straddle", "xxxBearer [sec"); /* redacted, then cut */
    Call s;
    run_call(p, "straddle", NULL, &s);
    assert_null(strstr(s.error->message, "sekr")); /* not even a prefix of the secret */
    g_error_free(s.error);
    expect_tool_error(p, "trailing", "not JSON");
    expect_tool_error(p, "huge", "larger than 1048576 bytes");
    expect_tool_error(p, "huge-error", "HTTP 500 Internal Server Error: eeee"); /* excerpt */
    expect_tool_error(p, "away", "redirects to another origin");
    expect_tool_error(p, "loop", "more than 5 redirects");
    expect_tool_error(p, "hostless", "HTTP 302");
    sbx_provider_free(p);
}

/* Calls waiting on a server do not hold up another: libsoup's 2 connections per host would. */
static void test_parallel(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = api_catalog(3000);
    SbxProvider *p = sbx_provider_new(&cat->providers[0], &error);
    Call slow[3], c;

    current = p;
    for (int i = 0; i < 3; i++) {
        memset(&slow[i], 0, sizeof(slow[i]));
        sbx_provider_call_async(p, "slow", "{}", NULL, on_done_p, &slow[i]);
    }
    run_call(p, "ok", NULL, &c);
    assert_string_equal(c.result, "{\"a\":[1,2]}");
    g_free(c.result);
    for (int i = 0; i < 3; i++) {
        assert_false(slow[i].done); /* "ok" did not wait for them to time out */
    }
    for (int i = 0; i < 3; i++) {
        wait_call(&slow[i]);
        assert_non_null(strstr(slow[i].error->message, "no answer within 3000 ms"));
        g_error_free(slow[i].error);
    }
    sbx_provider_free(p);
}

static void test_timeout_and_cancel(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = api_catalog(300);
    SbxProvider *p = sbx_provider_new(&cat->providers[0], &error);
    Call c;

    gint64 t = g_get_monotonic_time();
    expect_tool_error(p, "slow", "no answer within 300 ms");
    assert_true(g_get_monotonic_time() - t < 5 * 1000000);

    g_autoptr(GCancellable) cancel = g_cancellable_new();
    memset(&c, 0, sizeof(c));
    current = p;
    sbx_provider_call_async(p, "slow", "{}", cancel, on_done_p, &c);
    g_cancellable_cancel(cancel);
    wait_call(&c);
    assert_true(g_error_matches(c.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    g_error_free(c.error);
    sbx_provider_free(p);
}

static void test_missing_secret(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = api_catalog(1000);
    g_unsetenv("SANDBOX_SECRET_TEST_TOKEN");
    SbxProvider *p = sbx_provider_new(&cat->providers[0], &error);
    g_setenv("SANDBOX_SECRET_TEST_TOKEN", "sekrit-123", TRUE);
    assert_null(p);
    assert_non_null(strstr(error->message, "providers.api.tools.ok: header Authorization: "
                                           "secret TEST_TOKEN is not set"));
}

int main(void)
{
    /* As main.c does: GLib's desktop proxy resolver would write $XDG_RUNTIME_DIR/dconf. */
    g_setenv("GIO_USE_PROXY_RESOLVER", "dummy", TRUE);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_build_request),
        cmocka_unit_test(test_expand_secrets),
        cmocka_unit_test(test_secret_sources),
        cmocka_unit_test_setup_teardown(test_calls, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_parallel, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_timeout_and_cancel, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_missing_secret, setup_server, teardown_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
