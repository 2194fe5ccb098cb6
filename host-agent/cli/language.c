/*
 * The language of a program for `sandbox run` (language.h): --lang, else the file's extension.
 */
#include "cli/language.h"

static const struct {
    const char *suffix;
    SbxLanguage language;
} suffixes[] = {
    {".js", SBX_LANG_JAVASCRIPT},  {".mjs", SBX_LANG_JAVASCRIPT}, {".ts", SBX_LANG_TYPESCRIPT},
    {".mts", SBX_LANG_TYPESCRIPT}, {".py", SBX_LANG_PYTHON},
};

gboolean sbx_cli_language_of_file(const char *path, SbxLanguage *ret)
{
    for (gsize i = 0; path != NULL && i < G_N_ELEMENTS(suffixes); i++) {
        if (g_str_has_suffix(path, suffixes[i].suffix)) {
            *ret = suffixes[i].language;
            return TRUE;
        }
    }
    return FALSE;
}

gboolean sbx_cli_language_pick(const char *name, const char *path, SbxLanguage *ret, GError **error)
{
    if (name == NULL) {
        if (sbx_cli_language_of_file(path, ret)) {
            return TRUE;
        }
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "cannot tell the language of `%s` (.js .mjs .ts .mts .py): use --lang "
                    "javascript|typescript|python",
                    path != NULL ? path : "-");
        return FALSE;
    }
    if (sbx_language_from_name(name, ret) < 0) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--lang: unknown language \"%s\" (" SBX_CLI_LANGUAGES ")", name);
        return FALSE;
    }
    return TRUE;
}
