/*
 * The function call of an execution (docs/protocol.md, `execute`'s `entry`, `args` and
 * `kwargs`): the one check every front end makes (`sandbox run`'s options, `sandbox serve`'s
 * `run`, the HTTP API's body), so that all three refuse the same calls with the same words.
 * Pure: the protocol library and GLib, so the front ends' parsers and their fuzz targets can
 * compile it in.
 */
#pragma once

#include <glib.h>

#include "protocol/limits.h"
#include "protocol/message.h"

/* What an entry must be: the words of sbx_exec_call_check(), also for one that is no string. */
#define SBX_EXEC_CALL_ENTRY_RULE                                                                   \
    "entry: an identifier, the name of the function to call ([A-Za-z_$][A-Za-z0-9_$]*, at "        \
    "most " G_STRINGIFY(SBX_NAME_MAX) " characters)"

/**
 * Check the call of a @language program's function: @entry (NULL: none) an identifier,
 * @args_json (NULL: none) the text of a JSON array, @kwargs_json (NULL: none) the text of a
 * JSON object and only for Python, and arguments only with an entry. The texts must be JSON
 * already (sbx_json_normalize(), sbx_json_member_text()). NULL if the call is fine, else what is
 * wrong, for people: static text that starts with the member's name (`entry: ...`).
 */
const char *sbx_exec_call_check(SbxLanguage language, const char *entry, const char *args_json,
                                const char *kwargs_json);
