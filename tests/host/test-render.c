/*
 * `sandbox tools --types`: the catalog's namespace rendered as TypeScript declarations and
 * Python stubs (names sanitised as the guest sees them, schema keywords to types, bounds).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "render.h"

static SbxCatalog *parse(const char *json)
{
    g_autoptr(GError) error = NULL;
    SbxCatalog *c = sbx_catalog_parse(json, strlen(json), "cat.json", "/base", &error);
    if (c == NULL) {
        fail_msg("catalog: %s", error->message);
    }
    return c;
}

static char *render(const char *json, SbxRenderLang lang)
{
    g_autoptr(SbxCatalog) c = parse(json);
    g_autoptr(GError) error = NULL;
    char *text = sbx_render_types(c, lang, &error);
    if (text == NULL) {
        fail_msg("render: %s", error->message);
    }
    return text;
}

static void expect_in(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL) {
        fail_msg("expected `%s` in:\n%s", needle, text);
    }
}

/* One tool "p.t" with input schema @schema. */
static char *render_schema(const char *schema, SbxRenderLang lang)
{
    g_autofree char *json = g_strdup_printf(
        "{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"/bin/cat\"], "
        "\"tools\": {\"t\": {\"input_schema\": %s}}}}}",
        schema);
    return render(json, lang);
}

#define CMD "\"kind\": \"command\", \"command\": [\"/bin/cat\"]"

static const char small_catalog[] =
    "{\"providers\": {"
    "\"git-hub\": {" CMD ", \"tools\": {"
    "  \"search-issues\": {\"description\": \"Find issues\", \"input_schema\": {\"type\": "
    "\"object\", \"properties\": {\"q\": {\"type\": \"string\"}, \"limit\": {\"type\": "
    "\"integer\"}}, \"required\": [\"q\"]}},"
    "  \"class\": {}}},"
    "\"calc\": {" CMD ", \"tools\": {\"add\": {\"description\": \"a + b\", \"input_schema\": "
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": "
    "\"number\"}}, \"required\": [\"a\", \"b\"]}, \"output_schema\": {\"type\": \"number\"}}}}"
    "}}";

static void test_golden_ts(void **state)
{
    (void)state;
    g_autofree char *text = render(small_catalog, SBX_RENDER_TS);
    assert_string_equal(
        text, "// The tools of cat.json, as guest code names them (`sandbox tools --types ts`).\n"
              "// Each call returns a Promise: Promise.all runs calls in parallel.\n"
              "declare const tools: {\n"
              "  /** provider `git-hub` */\n"
              "  git_hub: {\n"
              "    /** `git-hub.search-issues`: Find issues */\n"
              "    search_issues(input: { q: string; limit?: number; }): Promise<unknown>;\n"
              "    /** `git-hub.class` */\n"
              "    class_(input: { [key: string]: unknown }): Promise<unknown>;\n"
              "  };\n"
              "  /** provider `calc` */\n"
              "  calc: {\n"
              "    /** `calc.add`: a + b */\n"
              "    add(input: { a: number; b: number; }): Promise<number>;\n"
              "  };\n"
              "};\n");
}

static void test_golden_py(void **state)
{
    (void)state;
    g_autofree char *text = render(small_catalog, SBX_RENDER_PY);
    assert_string_equal(
        text, "# The tools of cat.json, as guest code names them (`sandbox tools --types py`).\n"
              "# A call blocks; `await tools.p.t.aio(input)` is the awaitable form.\n"
              "from typing import Any, Literal, Required, TypedDict\n"
              "\n\n"
              "_Input0_search_issues = TypedDict(\"_Input0_search_issues\", {\"q\": Required[str], "
              "\"limit\": int}, total=False)\n"
              "\n"
              "class _provider_git_hub:\n"
              "    \"provider `git-hub`\"\n"
              "\n"
              "    def search_issues(self, input: _Input0_search_issues) -> Any:\n"
              "        \"`git-hub.search-issues`: Find issues\"\n"
              "        ...\n"
              "\n"
              "    def class_(self, input: dict[str, Any]) -> Any:\n"
              "        \"`git-hub.class`\"\n"
              "        ...\n"
              "\n\n"
              "_Input2_add = TypedDict(\"_Input2_add\", {\"a\": Required[float], \"b\": "
              "Required[float]}, total=False)\n"
              "\n"
              "class _provider_calc:\n"
              "    \"provider `calc`\"\n"
              "\n"
              "    def add(self, input: _Input2_add) -> Any:\n"
              "        \"`calc.add`: a + b\"\n"
              "        ...\n"
              "\n\n"
              "class _Tools:\n"
              "    git_hub: _provider_git_hub\n"
              "    calc: _provider_calc\n"
              "\n\n"
              "tools: _Tools\n");
}

static void test_names_sanitised(void **state)
{
    (void)state;
    const char *json = "{\"providers\": {\"2fa\": {" CMD ", \"tools\": {\"import\": {}, "
                       "\"a-b\": {}, \"a_b\": {}}}}}";
    g_autofree char *ts = render(json, SBX_RENDER_TS);
    expect_in(ts, "  _2fa: {\n");
    expect_in(ts, "    import_(input:");
    expect_in(ts, "    a_b(input:");    /* already an identifier: keeps its name */
    expect_in(ts, "    a_b__2(input:"); /* `a-b` collides */
    expect_in(ts, "/** `2fa.a-b` */\n    a_b__2(");
    g_autofree char *py = render(json, SBX_RENDER_PY);
    expect_in(py, "class _provider__2fa:");
    expect_in(py, "    def import_(self, input: dict[str, Any]) -> Any:");
    expect_in(py, "    _2fa: _provider__2fa\n");
}

static void test_properties(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\": \"object\", \"required\": [\"id\", \"x-y\"], \"properties\": {"
        "\"id\": {\"type\": \"integer\"}, \"x-y\": {\"type\": \"boolean\"}, "
        "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, "
        "\"state\": {\"enum\": [\"open\", \"closed\", null, 1, true]}, "
        "\"k\": {\"const\": \"v\"}, "
        "\"opt\": {\"type\": [\"string\", \"null\"]}, "
        "\"u\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"number\"}]}, "
        "\"o\": {\"oneOf\": [{\"type\": \"null\"}, {\"type\": \"boolean\"}]}, "
        "\"all\": {\"allOf\": [{\"properties\": {\"a\": {}}}, {\"properties\": {\"b\": "
        "{\"type\": \"string\"}}, \"required\": [\"b\"]}]}, "
        "\"nested\": {\"type\": \"object\", \"properties\": {\"inner\": {\"type\": \"object\", "
        "\"properties\": {\"n\": {\"type\": \"number\"}}, \"required\": [\"n\"]}}}, "
        "\"free\": {\"type\": \"object\"}, \"weird\": {\"not\": {}}, \"any\": true}}";
    g_autofree char *ts = render_schema(schema, SBX_RENDER_TS);
    expect_in(ts, "t(input: { id: number; \"x-y\": boolean; tags?: Array<string>; "
                  "state?: (\"open\" | \"closed\" | null | 1 | true); k?: \"v\"; "
                  "opt?: (string | null); u?: (string | number); o?: (null | boolean); "
                  "all?: ({ a?: unknown; } & { b: string; }); "
                  "nested?: { inner?: { n: number; }; }; free?: { [key: string]: unknown }; "
                  "weird?: unknown; any?: unknown; }): Promise<unknown>;");
    g_autofree char *py = render_schema(schema, SBX_RENDER_PY);
    expect_in(py, "{\"id\": Required[int], \"x-y\": Required[bool], \"tags\": list[str], "
                  "\"state\": Literal[\"open\", \"closed\", None, 1, True], "
                  "\"k\": Literal[\"v\"], \"opt\": (str | None), \"u\": (str | float), "
                  "\"o\": (None | bool), \"all\": Any, \"nested\": dict[str, Any], "
                  "\"free\": dict[str, Any], \"weird\": Any, \"any\": Any}, total=False)");
}

static void test_ref(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\": \"object\", \"properties\": {"
        "\"p\": {\"$ref\": \"#/$defs/point\"}, \"q\": {\"$ref\": \"#/definitions/a~1b\"}, "
        "\"r\": {\"$ref\": \"#/$defs/list\"}}, "
        "\"$defs\": {\"point\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": "
        "\"number\"}}, \"required\": [\"x\"]}, "
        "\"list\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": "
        "\"#/$defs/list\"}}}}, "
        "\"definitions\": {\"a/b\": {\"type\": \"string\"}}}";
    g_autofree char *ts = render_schema(schema, SBX_RENDER_TS);
    expect_in(ts, "p?: { x: number; }; q?: string; r?: { next?: { next?: ");
    /* the recursive $ref stops at the depth bound */
    expect_in(ts, "next?: unknown; }");
    g_assert_cmpuint(strlen(ts), <, 2000);

    /* "#" is the whole schema (fuzz-catalog found it read past g_strsplit's empty result) */
    g_autofree char *self = render_schema(
        "{\"type\": \"object\", \"properties\": {\"me\": {\"$ref\": \"#\"}}}", SBX_RENDER_TS);
    expect_in(self, "me?: { me?: { me?: ");
}

static void test_unknown_schema(void **state)
{
    (void)state;
    g_autofree char *ts = render_schema("{\"not\": {\"type\": \"string\"}}", SBX_RENDER_TS);
    expect_in(ts, "t(input: unknown): Promise<unknown>;");
    g_autofree char *py = render_schema("{\"not\": {\"type\": \"string\"}}", SBX_RENDER_PY);
    expect_in(py, "def t(self, input: dict[str, Any]) -> Any:");
}

static void test_comment_escaped(void **state)
{
    (void)state;
    const char *json = "{\"providers\": {\"p\": {" CMD ", \"tools\": {\"t\": {\"description\": "
                       "\"ends */ here\\nline \\\"2\\\"\"}}}}}";
    g_autofree char *ts = render(json, SBX_RENDER_TS);
    expect_in(ts, "/** `p.t`: ends *\\/ here\n     * line \"2\" */\n");
    g_autofree char *py = render(json, SBX_RENDER_PY);
    expect_in(py, "        \"`p.t`: ends */ here\\nline \\\"2\\\"\"\n");
}

/* $ref fan-out multiplies the text: the output bound stops it with an error. */
static void test_output_bound(void **state)
{
    (void)state;
    GString *defs = g_string_new("{\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": "
                                 "\"#/$defs/d0\"}}, \"$defs\": {");
    for (int i = 0; i < 8; i++) {
        g_string_append_printf(defs, "%s\"d%d\": {\"anyOf\": [", i ? ", " : "", i);
        for (int k = 0; k < 64; k++) {
            g_string_append_printf(defs, "%s{\"$ref\": \"#/$defs/d%d\"}", k ? ", " : "", i + 1);
        }
        g_string_append(defs, "]}");
    }
    g_string_append(defs, ", \"d8\": {\"type\": \"string\"}}}");
    g_autofree char *json = g_strdup_printf("{\"providers\": {\"p\": {" CMD
                                            ", \"tools\": {\"t\": {\"input_schema\": %s}}}}}",
                                            defs->str);
    g_string_free(defs, TRUE);
    g_autoptr(SbxCatalog) c = parse(json);
    g_autoptr(GError) error = NULL;
    g_autofree char *text = sbx_render_types(c, SBX_RENDER_TS, &error);
    assert_null(text);
    assert_non_null(strstr(error->message, "exceed"));
}

/* The chosen tools alone (get_tool_types of the MCP server), and their providers. */
static void test_only(void **state)
{
    static const char *const add[] = {"calc.add", "nope.x", NULL};
    static const char *const klass[] = {"git-hub.class", NULL};
    static const char *const none[] = {"calc.sub", NULL};
    (void)state;
    g_autoptr(SbxCatalog) c = parse(small_catalog);
    g_autofree char *ts = sbx_render_types_of(c, SBX_RENDER_TS, add, NULL);
    assert_string_equal(
        ts, "// The tools of cat.json, as guest code names them (`sandbox tools --types ts`).\n"
            "// Each call returns a Promise: Promise.all runs calls in parallel.\n"
            "declare const tools: {\n"
            "  /** provider `calc` */\n"
            "  calc: {\n"
            "    /** `calc.add`: a + b */\n"
            "    add(input: { a: number; b: number; }): Promise<number>;\n"
            "  };\n"
            "};\n");
    g_autofree char *py = sbx_render_types_of(c, SBX_RENDER_PY, klass, NULL);
    expect_in(py, "    def class_(self, input: dict[str, Any]) -> Any:");
    expect_in(py, "    git_hub: _provider_git_hub\n");
    assert_null(strstr(py, "search_issues"));
    assert_null(strstr(py, "calc"));
    g_autofree char *empty = sbx_render_types_of(c, SBX_RENDER_PY, none, NULL);
    expect_in(empty, "class _Tools:\n    pass\n");
    /* NULL: all, as sbx_render_types(). */
    g_autofree char *all = sbx_render_types_of(c, SBX_RENDER_TS, NULL, NULL);
    g_autofree char *golden = sbx_render_types(c, SBX_RENDER_TS, NULL);
    assert_string_equal(all, golden);
}

static void test_empty_and_lang(void **state)
{
    (void)state;
    g_autoptr(SbxCatalog) c = sbx_catalog_new_empty();
    g_autofree char *ts = sbx_render_types(c, SBX_RENDER_TS, NULL);
    expect_in(ts, "declare const tools: {\n};\n");
    g_autofree char *py = sbx_render_types(c, SBX_RENDER_PY, NULL);
    expect_in(py, "class _Tools:\n    pass\n");
    SbxRenderLang lang = SBX_RENDER_TS;
    assert_true(sbx_render_lang_parse("py", &lang));
    assert_int_equal(lang, SBX_RENDER_PY);
    assert_true(sbx_render_lang_parse("ts", &lang));
    assert_int_equal(lang, SBX_RENDER_TS);
    assert_false(sbx_render_lang_parse("rb", &lang));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_ts),
        cmocka_unit_test(test_golden_py),
        cmocka_unit_test(test_names_sanitised),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_unknown_schema),
        cmocka_unit_test(test_comment_escaped),
        cmocka_unit_test(test_output_bound),
        cmocka_unit_test(test_only),
        cmocka_unit_test(test_empty_and_lang),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
