/*
 * Catalog validation: a valid catalog becomes typed providers; every kind of mistake is refused
 * with an error that names the file and the field.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "tools-error.h"
#include "tools.h"

static SbxCatalog *parse(const char *json, GError **error)
{
    return sbx_catalog_parse(json, strlen(json), "cat.json", "/base", error);
}

static void test_valid(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    const char *json =
        "{\"version\": 1, \"providers\": {"
        " \"github\": {\"kind\": \"command\", \"command\": [\"./gh-tool\", \"--json\"],"
        "  \"timeout_ms\": 2500, \"tools\": {"
        "   \"search-issues\": {\"description\": \"Search\", \"input_schema\":"
        "      {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}},"
        "   \"get\": {}}},"
        " \"local\": {\"kind\": \"command\", \"command\": [\"/usr/bin/env\"], \"tools\": {}}"
        "}}";
    g_autoptr(SbxCatalog) cat = parse(json, &error);

    assert_non_null(cat);
    assert_int_equal(cat->n_providers, 2);
    const SbxCatalogProvider *gh = &cat->providers[0];
    assert_string_equal(gh->name, "github");
    assert_int_equal(gh->kind, SBX_PROVIDER_COMMAND);
    assert_string_equal(gh->command[0], "/base/./gh-tool"); /* relative to the catalog */
    assert_string_equal(gh->command[1], "--json");
    assert_null(gh->command[2]);
    assert_string_equal(gh->workdir, "/base");
    assert_int_equal(gh->timeout_ms, 2500);
    assert_int_equal(gh->n_tools, 2);
    assert_string_equal(gh->tools[0].name, "search-issues");
    assert_string_equal(gh->tools[0].description, "Search");
    assert_string_equal(gh->tools[0].input_schema_json,
                        "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}");
    assert_null(gh->tools[1].description);
    assert_null(gh->tools[1].input_schema_json);
    const SbxCatalogProvider *local = &cat->providers[1];
    assert_string_equal(local->command[0], "/usr/bin/env");
    assert_int_equal(local->timeout_ms, SBX_CATALOG_TIMEOUT_DEFAULT_MS);
    assert_int_equal(local->n_tools, 0);
}

typedef struct {
    const char *json;
    const char *message; /* substring of the expected error */
} Bad;

static const Bad bad[] = {
    {"", "cat.json:1:1: invalid JSON"},
    {"{\"providers\": {}\n,}", "cat.json:2:2: invalid JSON"},
    {"[]", "expected a JSON object at the top level"},
    {"{\"providers\": {}} x", "cat.json:1:19: text after the JSON value"},
    {"{}", "cat.json: providers: expected an object"},
    {"{\"providers\": []}", "cat.json: providers: expected an object"},
    {"{\"providers\": {}, \"extra\": 1}", "unknown field \"extra\""},
    {"{\"providers\": {}, \"providers\": {}}", "cat.json:1:19: duplicate member name"},
    {"{\"version\": 2, \"providers\": {}}", "version: unsupported catalog version"},
    {"{\"providers\": {\"p\": 1}}", "providers.p: expected an object"},
    {"{\"providers\": {\"p\": {}}}", "providers.p: missing field \"kind\""},
    {"{\"providers\": {\"p\": {\"kind\": 1}}}", "providers.p.kind: expected a string"},
    {"{\"providers\": {\"p\": {\"kind\": \"smtp\"}}}",
     "providers.p.kind: unsupported provider kind \"smtp\""},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"tools\": {}}}}",
     "providers.p: missing field \"command\""},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [], \"tools\": {}}}}",
     "providers.p.command: expected an array of 1 to 256 strings"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": \"ls\", \"tools\": {}}}}",
     "providers.p.command: expected an array"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\", 3], \"tools\": {}}}}",
     "providers.p.command: argument 1: expected a non-empty string"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"\"], \"tools\": {}}}}",
     "providers.p.command: argument 0"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"]}}}",
     "providers.p: missing field \"tools\""},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"], \"tools\": []}}}",
     "providers.p.tools: expected an object"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"], \"timeout_ms\": 0,"
     " \"tools\": {}}}}",
     "providers.p.timeout_ms: expected an integer from 1 to 600000"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"], \"timeout_ms\": 1.5,"
     " \"tools\": {}}}}",
     "providers.p.timeout_ms: expected an integer"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"timeout_ms\": \"5\", \"tools\": {}}}}",
     "providers.p.timeout_ms: expected an integer"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"], \"tools\": {},"
     " \"comand\": 1}}}",
     "providers.p: unknown field \"comand\""},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": []}}}}",
     "providers.p.tools.t: expected an object"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": {\"description\": 5}}}}}",
     "providers.p.tools.t.description: expected a string"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": {\"input_schema\": \"object\"}}}}}",
     "providers.p.tools.t.input_schema: expected a JSON Schema object"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": {\"inputSchema\": {}}}}}}",
     "providers.p.tools.t: unknown field \"inputSchema\""},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": {}, \"t\": {}}}}}",
     "cat.json:1:79: duplicate member name"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"\": {}}}}}",
     "providers.p.tools.\"\": a name must have 1 to 128 bytes"},
    {"{\"providers\": {\"a b\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\\n\": {}}}}}",
     "providers.\"a b\".tools.\"t\n\": the name contains a control character"},
    {"{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
     " \"tools\": {\"t\": {\"description\": \"x\", \"description\": \"y\"}}}}}",
     "cat.json:1:96: duplicate member name"},
};

static void test_invalid(void **state)
{
    (void)state;
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GError) error = NULL;
        g_autoptr(SbxCatalog) cat = parse(bad[i].json, &error);
        if (cat != NULL) {
            fail_msg("accepted: %s", bad[i].json);
        }
        assert_true(g_error_matches(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID));
        if (strstr(error->message, bad[i].message) == NULL) {
            fail_msg("for %s\n  got:      %s\n  expected: %s", bad[i].json, error->message,
                     bad[i].message);
        }
    }
}

/* Builds a catalog with @n tools in one provider, each with a description of @desc bytes. */
static char *many_tools(int n, int desc)
{
    GString *s = g_string_new("{\"providers\": {\"p\": {\"kind\": \"command\", "
                              "\"command\": [\"ls\"], \"tools\": {");
    g_autofree char *d = g_strnfill(desc, 'd');
    for (int i = 0; i < n; i++) {
        g_string_append_printf(s, "%s\"t%d\": {\"description\": \"%s\"}", i ? "," : "", i, d);
    }
    g_string_append(s, "}}}}");
    return g_string_free(s, FALSE);
}

static void test_limits(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autofree char *ok = many_tools(SBX_TOOLS_MAX, 1);
    g_autofree char *too_many = many_tools(SBX_TOOLS_MAX + 1, 1);
    g_autofree char *long_desc = many_tools(1, SBX_CATALOG_DESCRIPTION_MAX + 1);
    g_autofree char *huge = many_tools(300, 4000);

    g_autoptr(SbxCatalog) cat = parse(ok, &error);
    assert_non_null(cat);
    assert_null(parse(too_many, &error));
    assert_non_null(strstr(error->message, "more than 1024 tools"));
    g_clear_error(&error);
    assert_null(parse(long_desc, &error));
    assert_non_null(strstr(error->message, "providers.p.tools.t0.description: expected UTF-8"));
    g_clear_error(&error);
    assert_true(strlen(huge) > SBX_CATALOG_FILE_MAX);
    assert_null(parse(huge, &error));
    assert_true(g_error_matches(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO));
    g_clear_error(&error);
    /* Nested deeper than cJSON's limit: a syntax-level refusal, not a stack overflow. */
    g_autofree char *deep_open = g_strnfill(100000, '[');
    g_autofree char *deep = g_strdup_printf("{\"providers\": {}, \"x\": %s}", deep_open);
    assert_null(parse(deep, &error));
    assert_non_null(strstr(error->message, "nested deeper than 32 levels"));
}

static void test_load_file(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_dir_make_tmp("sbx-catalog-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "tools.json", NULL);
    g_autofree char *big = g_build_filename(dir, "big.json", NULL);
    const char *json = "{\"providers\": {\"p\": {\"kind\": \"command\","
                       " \"command\": [\"bin/tool\"], \"tools\": {\"t\": {}}}}}";

    assert_true(g_file_set_contents(path, json, -1, NULL));
    g_autoptr(SbxCatalog) cat = sbx_catalog_load(path, &error);
    assert_non_null(cat);
    g_autofree char *expect = g_build_filename(dir, "bin/tool", NULL);
    assert_string_equal(cat->providers[0].command[0], expect);
    assert_string_equal(cat->providers[0].workdir, dir);

    /* Too large: refused from its size, before reading. */
    g_autofree char *pad = g_strnfill(SBX_CATALOG_FILE_MAX + 1, ' ');
    assert_true(g_file_set_contents(big, pad, -1, NULL));
    assert_null(sbx_catalog_load(big, &error));
    assert_true(g_error_matches(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO));
    g_clear_error(&error);
    assert_null(sbx_catalog_load(dir, &error)); /* a directory */
    g_clear_error(&error);
    unlink(big);
    unlink(path);
    assert_null(sbx_catalog_load(path, &error)); /* missing */
    assert_non_null(strstr(error->message, "No such file"));
    assert_int_equal(rmdir(dir), 0);
}

/* Names that cannot live side by side as identifiers still load (collision suffixes). */
static void test_tools_from_catalog(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    const char *json = "{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"ls\"],"
                       " \"tools\": {\"a-b\": {}, \"a_b\": {}, \"for\": {}}}}}";
    SbxCatalog *cat = parse(json, &error);
    g_autoptr(SbxTools) tools = sbx_tools_new(cat, &error);
    gsize n = 0;

    assert_non_null(tools);
    const SbxToolDecl *d = sbx_tools_decls(tools, &n);
    assert_int_equal(n, 3);
    assert_string_equal(d[0].name, "a_b__2");
    assert_string_equal(d[1].name, "a_b");
    assert_string_equal(d[2].name, "for_");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_tools_from_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
