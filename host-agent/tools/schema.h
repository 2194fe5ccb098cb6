/*
 * A JSON Schema validator for the keywords tool schemas use (docs/tools.md, "Validation"): type,
 * properties, patternProperties, required, additionalProperties, items / prefixItems /
 * additionalItems, enum, const, minimum / maximum / exclusive*, multipleOf, minLength /
 * maxLength, pattern, minItems / maxItems, minProperties / maxProperties, uniqueItems, anyOf /
 * oneOf / allOf / not, $ref to local definitions, boolean schemas. Unknown keywords are ignored,
 * as the spec says.
 *
 * A schema is compiled once (parsed, checked, regexes compiled, $refs resolved) and then
 * validates any number of instances. The schema and the instance are JSON text: cJSON stays
 * inside schema.c. Validation is bounded (depth, a step budget, regex match limits and a 200 ms
 * cap on regex time), so a hostile schema or instance cannot hold the main loop.
 */
#pragma once

#include <glib.h>

/*
 * Largest schema text. A catalog holds at most SBX_CATALOG_SCHEMA_MAX (64 KiB) per schema; an MCP
 * server's tools/list answer may carry larger ones, and 256 KiB is still small enough that
 * compiling it (one walk, one regex per pattern) takes a millisecond.
 */
#define SBX_SCHEMA_TEXT_MAX (256 * 1024)

/* Largest instance: a protocol frame (SBX_FRAME_MAX) cannot carry more. */
#define SBX_SCHEMA_INSTANCE_MAX (4 * 1024 * 1024)

#define SBX_SCHEMA_ERROR (sbx_schema_error_quark())
GQuark sbx_schema_error_quark(void);

typedef enum {
    SBX_SCHEMA_ERROR_SCHEMA,      /* the schema itself is invalid or unsupported (compile) */
    SBX_SCHEMA_ERROR_JSON,        /* the instance is not JSON (or nested too deep) */
    SBX_SCHEMA_ERROR_INVALID,     /* the instance does not satisfy the schema */
    SBX_SCHEMA_ERROR_TOO_COMPLEX, /* a limit ran out before an answer (steps, depth, regex) */
} SbxSchemaErrorCode;

typedef struct SbxSchema SbxSchema;

/**
 * Compile the JSON Schema @schema_json (an object or a boolean). Fails with SBX_SCHEMA_ERROR_SCHEMA
 * and a message naming the place (`properties.q.pattern: invalid regular expression ...`) if the
 * schema is malformed, too large, or uses a $ref that is not local.
 */
SbxSchema *sbx_schema_compile(const char *schema_json, GError **error);

/** Free @schema. Accepts NULL. */
void sbx_schema_free(SbxSchema *schema);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxSchema, sbx_schema_free)

/**
 * Validate @instance_json against @schema. On failure the message names the place, starting with
 * @root (e.g. "input"): `input.items[2].name: expected a string, got a number`,
 * `input: missing required property "q"`. Only the first failure is reported.
 */
gboolean sbx_schema_validate(const SbxSchema *schema, const char *root, const char *instance_json,
                             GError **error);
