/*
 * The official JSON Schema test suite (npm package json-schema-test-suite, installed by
 * tests/schema/fetch-suite into .deps/) against our validator.
 *
 * The package ships draft 3 and draft 4 only; draft 4 is the one whose keywords match ours (MCP
 * schemas are draft 2020-12 or draft-07, which changed none of the keywords below except that
 * exclusiveMinimum/exclusiveMaximum became numbers; the validator accepts both forms).
 *
 * Files are chosen by keyword: every case of a file in SUPPORTED must pass, except the groups in
 * SKIPPED, each with its reason (docs/tools.md lists the same gaps). Files for keywords we do not
 * implement are not run, and are listed as such in the output.
 *
 * Usage: test-schema-suite DIR   (DIR: .../json-schema-test-suite/tests/draft4)
 */
#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "protocol/json.h"
#include "protocol/limits.h"
#include "schema.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* Keyword files whose every case must pass. */
static const char *const SUPPORTED[] = {
    "additionalItems.json",
    "additionalProperties.json",
    "allOf.json",
    "anyOf.json",
    "default.json",
    "enum.json",
    "items.json",
    "maxItems.json",
    "maxLength.json",
    "maxProperties.json",
    "maximum.json",
    "minItems.json",
    "minLength.json",
    "minProperties.json",
    "minimum.json",
    "multipleOf.json",
    "not.json",
    "oneOf.json",
    "pattern.json",
    "patternProperties.json",
    "properties.json",
    "ref.json",
    "required.json",
    "type.json",
    "uniqueItems.json",
    /* Numbers beyond a double: every literal is compared exactly (protocol/json.h). */
    "optional/bignum.json",
    NULL,
};

/* Groups of supported files that are not run, each a known gap (file, group description, why). */
static const char *const SKIPPED[][3] = {
    /* A $ref to another document; tool schemas are self-contained, we never fetch. */
    {"ref.json", "remote ref, containing refs itself", "remote $ref (the draft-04 meta-schema)"},
};

/* Keyword files not run at all, and why (printed, so the report shows what is not covered). */
static const char *const NOT_RUN[][2] = {
    {"definitions.json", "validates schemas against the draft-04 meta-schema (a remote $ref)"},
    {"refRemote.json", "remote $ref"},
    {"dependencies.json", "`dependencies`: a keyword tool schemas do not use (docs/tools.md)"},
    {"optional/zeroTerminatedFloats.json",
     "draft 4 only: from draft 6 on (MCP's drafts), 1.0 is an integer, as here"},
};

typedef struct {
    int passed, failed, skipped;
} Counts;

static gboolean is_skipped(const char *file, const char *group)
{
    for (gsize i = 0; i < G_N_ELEMENTS(SKIPPED); i++) {
        if (strcmp(SKIPPED[i][0], file) == 0 && strcmp(SKIPPED[i][1], group) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

static void run_case(const SbxSchema *s, const char *file, const char *group, const cJSON *t,
                     Counts *n)
{
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data");
    gboolean want = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "valid"));
    /* sbx_json_print: the case's numbers as their literals, exactly. */
    g_autofree char *json = sbx_json_print(data);
    g_autoptr(GError) error = NULL;

    gboolean got = sbx_schema_validate(s, "data", json, &error);
    if (got == want && (got || error->code == SBX_SCHEMA_ERROR_INVALID)) {
        n->passed++;
        return;
    }
    n->failed++;
    printf("FAIL %s / %s / %s: expected %s, got %s%s%s\n", file, group, desc->valuestring,
           want ? "valid" : "invalid", got ? "valid" : "invalid", got ? "" : ": ",
           got ? "" : error->message);
}

static void run_group(const char *file, const cJSON *g, Counts *n)
{
    const char *group = cJSON_GetObjectItemCaseSensitive(g, "description")->valuestring;
    const cJSON *tests = cJSON_GetObjectItemCaseSensitive(g, "tests");
    const cJSON *t;
    g_autoptr(GError) error = NULL;

    if (is_skipped(file, group)) {
        n->skipped += cJSON_GetArraySize(tests);
        return;
    }
    g_autofree char *text = sbx_json_print(cJSON_GetObjectItemCaseSensitive(g, "schema"));
    g_autoptr(SbxSchema) s = sbx_schema_compile(text, &error);
    if (s == NULL) {
        n->failed += cJSON_GetArraySize(tests);
        printf("FAIL %s / %s: schema does not compile: %s\n", file, group, error->message);
        return;
    }
    cJSON_ArrayForEach(t, tests)
    {
        run_case(s, file, group, t, n);
    }
}

static gboolean run_file(const char *dir, const char *file, Counts *total)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);
    g_autofree char *text = NULL;
    g_autoptr(GError) error = NULL;
    gsize len;
    Counts n = {0};
    const cJSON *g;

    if (!g_file_get_contents(path, &text, &len, &error)) {
        printf("FAIL %s: %s\n", file, error->message);
        return FALSE;
    }
    g_autoptr(cJSON) root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, NULL);
    if (!cJSON_IsArray(root)) {
        printf("FAIL %s: not a test file\n", file);
        return FALSE;
    }
    cJSON_ArrayForEach(g, root)
    {
        run_group(file, g, &n);
    }
    printf("%-26s %3d passed, %d failed, %d skipped\n", file, n.passed, n.failed, n.skipped);
    total->passed += n.passed;
    total->failed += n.failed;
    total->skipped += n.skipped;
    return n.failed == 0;
}

int main(int argc, char **argv)
{
    Counts total = {0};
    gboolean ok = TRUE;

    if (argc != 2 || !g_file_test(argv[1], G_FILE_TEST_IS_DIR)) {
        fprintf(stderr,
                "usage: %s DIR (the suite's tests/draft4; run scripts/setup, which runs "
                "tests/schema/fetch-suite)\n",
                argv[0]);
        return 1;
    }
    for (const char *const *f = SUPPORTED; *f != NULL; f++) {
        ok = run_file(argv[1], *f, &total) && ok;
    }
    for (gsize i = 0; i < G_N_ELEMENTS(NOT_RUN); i++) {
        printf("%-26s not run: %s\n", NOT_RUN[i][0], NOT_RUN[i][1]);
    }
    printf("total: %d passed, %d failed, %d skipped (listed gaps)\n", total.passed, total.failed,
           total.skipped);
    return ok && total.failed == 0 ? 0 : 1;
}
