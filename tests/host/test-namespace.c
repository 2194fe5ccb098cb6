/*
 * The namespace: real names -> guest identifiers (sanitising, reserved words, collisions) and
 * back (reversibility), deterministically.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "namespace.h"
#include "protocol/message.h"

static void check_sanitize(const char *in, const char *out)
{
    g_autofree char *got = sbx_namespace_sanitize(in);
    if (g_strcmp0(got, out) != 0) {
        fail_msg("sanitize(\"%s\") = \"%s\", expected \"%s\"", in, got, out);
    }
}

static void test_sanitize(void **state)
{
    (void)state;
    check_sanitize("search_issues", "search_issues");
    check_sanitize("search-issues", "search_issues");
    check_sanitize("a.b c/d", "a_b_c_d");
    check_sanitize("$jq", "_jq"); /* `$` is not valid in Python */
    check_sanitize("2fa", "_2fa");
    check_sanitize("9", "_9");
    check_sanitize("héllo", "h_llo"); /* one `_` per character, not per byte */
    check_sanitize("日本", "__");
    check_sanitize("class", "class_");
    check_sanitize("import", "import_");
    check_sanitize("None", "None_");
    check_sanitize("then", "then_");
    check_sanitize("__proto__", "__proto___");
    check_sanitize("constructor", "constructor_");
    check_sanitize("Class", "Class");
    assert_null(sbx_namespace_sanitize(""));
    assert_null(sbx_namespace_sanitize("\xff\xfe"));
}

static void test_sanitize_valid_identifiers(void **state)
{
    (void)state;
    const char *names[] = {"a", "-", "2", "a-b-c", "for", "x.y", "日本語", "__init__", "_", NULL};
    for (int i = 0; names[i] != NULL; i++) {
        g_autofree char *s = sbx_namespace_sanitize(names[i]);
        assert_true(sbx_identifier_valid(s));
        assert_false(sbx_namespace_is_reserved(s) && strcmp(s, names[i]) == 0);
    }
    /* Very long names are cut so that a collision suffix still fits SBX_NAME_MAX. */
    char longname[300];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    g_autofree char *s = sbx_namespace_sanitize(longname);
    assert_true(strlen(s) <= SBX_NAME_MAX - 8);
}

static SbxNamespace *build(const char *const *providers, const char *const *const *tools, gsize n)
{
    g_autoptr(GError) error = NULL;
    SbxNamespace *ns = sbx_namespace_new();
    if (!sbx_namespace_build(ns, providers, tools, n, &error)) {
        fail_msg("build: %s", error->message);
    }
    return ns;
}

static void test_collisions(void **state)
{
    (void)state;
    /* a-b and a.b both sanitise to a_b, which is also a real name: the real one keeps it. */
    const char *const t0[] = {"a-b", "a.b", "a_b", "a_b__2", "ok", NULL};
    const char *const *tools[] = {t0};
    const char *const providers[] = {"p"};
    g_autoptr(SbxNamespace) ns = build(providers, tools, 1);

    assert_string_equal(sbx_namespace_tool_ident(ns, "p", "a_b"), "a_b");
    assert_string_equal(sbx_namespace_tool_ident(ns, "p", "a_b__2"), "a_b__2");
    assert_string_equal(sbx_namespace_tool_ident(ns, "p", "a-b"), "a_b__3");
    assert_string_equal(sbx_namespace_tool_ident(ns, "p", "a.b"), "a_b__4");
    assert_string_equal(sbx_namespace_tool_ident(ns, "p", "ok"), "ok");
}

static void test_reversible(void **state)
{
    (void)state;
    const char *const t0[] = {"search-issues", "search_issues", "class", "2x", NULL};
    const char *const t1[] = {"get", NULL};
    const char *const t2[] = {"get", "delete", NULL};
    const char *const *tools[] = {t0, t1, t2};
    const char *const providers[] = {"git-hub", "git_hub", "http"};
    g_autoptr(SbxNamespace) ns = build(providers, tools, 3);
    g_autoptr(GHashTable) idents = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);

    assert_string_equal(sbx_namespace_provider_ident(ns, "git_hub"), "git_hub");
    assert_string_equal(sbx_namespace_provider_ident(ns, "git-hub"), "git_hub__2");
    for (int p = 0; p < 3; p++) {
        const char *pid = sbx_namespace_provider_ident(ns, providers[p]);
        for (int t = 0; tools[p][t] != NULL; t++) {
            const char *tid = sbx_namespace_tool_ident(ns, providers[p], tools[p][t]);
            const char *rp = NULL, *rt = NULL;
            assert_true(sbx_identifier_valid(pid) && sbx_identifier_valid(tid));
            assert_false(sbx_namespace_is_reserved(tid));
            assert_true(sbx_namespace_resolve(ns, pid, tid, &rp, &rt));
            assert_string_equal(rp, providers[p]);
            assert_string_equal(rt, tools[p][t]);
            g_autofree char *key = g_strdup_printf("%s.%s", pid, tid);
            assert_false(g_hash_table_contains(idents, key)); /* unique */
            g_hash_table_add(idents, g_steal_pointer(&key));
        }
    }
    const char *rp = NULL, *rt = NULL;
    assert_false(sbx_namespace_resolve(ns, "git_hub", "nope", &rp, &rt));
    assert_false(sbx_namespace_resolve(ns, "nope", "get", &rp, &rt));
    assert_false(sbx_namespace_resolve(ns, "git-hub", "get", &rp, &rt)); /* real, not ident */
    assert_null(rp);
}

static void test_deterministic(void **state)
{
    (void)state;
    const char *const t0[] = {"x-1", "x_1", "x 1", "x.1", NULL};
    const char *const *tools[] = {t0};
    const char *const providers[] = {"p"};
    g_autoptr(SbxNamespace) a = build(providers, tools, 1);
    g_autoptr(SbxNamespace) b = build(providers, tools, 1);

    for (int i = 0; t0[i] != NULL; i++) {
        assert_string_equal(sbx_namespace_tool_ident(a, "p", t0[i]),
                            sbx_namespace_tool_ident(b, "p", t0[i]));
    }
    /* Rebuilding replaces the previous content. */
    const char *const t1[] = {"only", NULL};
    const char *const *tools1[] = {t1};
    assert_true(sbx_namespace_build(a, providers, tools1, 1, NULL));
    assert_null(sbx_namespace_tool_ident(a, "p", "x-1"));
    assert_string_equal(sbx_namespace_tool_ident(a, "p", "only"), "only");
}

static void test_invalid_name(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    const char *const t0[] = {"fine", "", NULL};
    const char *const *tools[] = {t0};
    const char *const providers[] = {"p"};
    g_autoptr(SbxNamespace) ns = sbx_namespace_new();

    assert_false(sbx_namespace_build(ns, providers, tools, 1, &error));
    assert_non_null(strstr(error->message, "provider \"p\""));
    assert_null(sbx_namespace_provider_ident(ns, "p"));
}

static void test_many_collisions(void **state)
{
    (void)state;
    /* 200 names that all sanitise to "t": all distinct, all resolvable. */
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    for (int i = 0; i < 200; i++) {
        g_ptr_array_add(names, g_strdup_printf("t%.*s", i % 5 + 1, "-----"));
    }
    for (int i = 0; i < 195; i++) { /* make them unique real names */
        char *n = g_ptr_array_index(names, i);
        g_ptr_array_index(names, i) = g_strdup_printf("%s%*s", n, i / 5 + 1, "");
        g_free(n);
    }
    g_ptr_array_add(names, NULL);
    const char *const *t0 = (const char *const *)names->pdata;
    const char *const *tools[] = {t0};
    const char *const providers[] = {"p"};
    g_autoptr(SbxNamespace) ns = build(providers, tools, 1);
    for (int i = 0; t0[i] != NULL; i++) {
        const char *id = sbx_namespace_tool_ident(ns, "p", t0[i]);
        const char *rp = NULL, *rt = NULL;
        assert_true(sbx_identifier_valid(id));
        assert_true(sbx_namespace_resolve(ns, "p", id, &rp, &rt));
        assert_string_equal(rt, t0[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sanitize),        cmocka_unit_test(test_sanitize_valid_identifiers),
        cmocka_unit_test(test_collisions),      cmocka_unit_test(test_reversible),
        cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_invalid_name),
        cmocka_unit_test(test_many_collisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
