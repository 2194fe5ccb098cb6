/*
 * The check of an execution's function call (call.h), shared by the front ends.
 */
#include "exec/call.h"

#include <string.h>

/* The first character of the JSON text @json: its value's kind ('[' an array, '{' an object). */
static char json_kind(const char *json)
{
    return json[strspn(json, " \t\r\n")];
}

const char *sbx_exec_call_check(SbxLanguage language, const char *entry, const char *args_json,
                                const char *kwargs_json)
{
    if (entry != NULL && !sbx_identifier_valid(entry)) {
        return SBX_EXEC_CALL_ENTRY_RULE;
    }
    if (args_json != NULL && json_kind(args_json) != '[') {
        return "args: a JSON array (the function's positional arguments)";
    }
    if (kwargs_json != NULL && json_kind(kwargs_json) != '{') {
        return "kwargs: a JSON object (the function's keyword arguments)";
    }
    if (entry == NULL && args_json != NULL) {
        return "args: only with an entry (the function to call)";
    }
    if (entry == NULL && kwargs_json != NULL) {
        return "kwargs: only with an entry (the function to call)";
    }
    if (kwargs_json != NULL && language != SBX_LANG_PYTHON) {
        return "kwargs: keyword arguments are for Python only (JavaScript and TypeScript "
               "functions take args)";
    }
    return NULL;
}
