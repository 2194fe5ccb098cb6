/*
 * The language of a program, as `sandbox run` reads it: from --lang or the file's name.
 */
#pragma once

#include <glib.h>

#include "protocol/message.h"

/** What --lang accepts and a file name can say, for messages. */
#define SBX_CLI_LANGUAGES SBX_LANGUAGE_NAMES

/**
 * The language a file's name says: `.js`, `.mjs` JavaScript; `.ts`, `.mts` TypeScript; `.py`
 * Python (case matters, as on the file system). FALSE (*@ret untouched) for any other name.
 */
gboolean sbx_cli_language_of_file(const char *path, SbxLanguage *ret);

/**
 * The language of a run: @name (--lang, a language's protocol name) if not NULL, else what
 * @path says. FALSE with a message for the user in @error when neither gives one.
 */
gboolean sbx_cli_language_pick(const char *name, const char *path, SbxLanguage *ret,
                               GError **error);
