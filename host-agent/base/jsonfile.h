/*
 * Reading small JSON files written by people or by our build (profiles, the image manifest):
 * size-checked before reading, parsed by sbx_json_parse() (protocol/json.h), errors with line
 * and column. The cJSON value returned stays in the module that loaded the file (CONTRIBUTING.md,
 * "Ownership").
 */
#pragma once

#include <cJSON.h>
#include <glib.h>

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/**
 * Parse @len bytes of @text as one JSON object (sbx_json_parse(): strict, numbers keep their
 * literals). Errors are in @domain/@code and start with @name, then the line and column.
 */
cJSON *sbx_json_object_parse(const char *name, const char *text, gsize len, GQuark domain, int code,
                             GError **error);

/**
 * Read @path (refused if larger than @max_bytes) and parse it as one JSON object.
 * Errors are in @domain/@code and start with the file's base name.
 */
cJSON *sbx_json_file_load(const char *path, gsize max_bytes, GQuark domain, int code,
                          GError **error);
