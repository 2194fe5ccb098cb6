/*
 * The one JSON builder and escaper of the host agent: JSON text written into a GString, with
 * commas and nesting kept by the builder, every string escaped whatever its bytes (invalid
 * UTF-8 and NUL become U+FFFD, control characters are escaped), and JSON texts of ours (a
 * report, a checked tool input) inserted as they are. What it writes follows the payload rules
 * of docs/protocol.md (no U+0000 anywhere), so every parser of ours accepts it.
 */
#pragma once

#include <glib.h>

/* Nesting the builder keeps track of: our documents (reports, API answers) nest a few deep. */
#define SBX_JSONB_DEPTH_MAX 16

typedef struct {
    GString *out;
    guint depth;
    gboolean want_comma[SBX_JSONB_DEPTH_MAX + 1];
    gboolean after_key;
} SbxJsonb;

/**
 * Append @len bytes of @data to @out as a JSON string literal. Invalid UTF-8 and NUL become
 * U+FFFD, control characters are escaped: any bytes give valid JSON that our strict parser
 * (protocol/json.h: no U+0000) accepts.
 */
void sbx_json_append_string(GString *out, const char *data, gsize len);

/** Start a document in a new GString. */
void sbx_jsonb_init(SbxJsonb *b);
/** The document's text (caller frees); @b is spent. */
char *sbx_jsonb_finish(SbxJsonb *b);
/** Drop the document (for error paths). */
void sbx_jsonb_clear(SbxJsonb *b);

void sbx_jsonb_begin_object(SbxJsonb *b);
void sbx_jsonb_end_object(SbxJsonb *b);
void sbx_jsonb_begin_array(SbxJsonb *b);
void sbx_jsonb_end_array(SbxJsonb *b);
/** The key of the next member (inside an object). */
void sbx_jsonb_key(SbxJsonb *b, const char *key);

/** A string value, or null when @s is NULL. */
void sbx_jsonb_string(SbxJsonb *b, const char *s);
/** A string value of @len bytes (any bytes). */
void sbx_jsonb_string_len(SbxJsonb *b, const char *s, gsize len);
void sbx_jsonb_int(SbxJsonb *b, gint64 v);
void sbx_jsonb_uint(SbxJsonb *b, guint64 v);
void sbx_jsonb_bool(SbxJsonb *b, gboolean v);
void sbx_jsonb_null(SbxJsonb *b);
/** A JSON text of ours, inserted as it is (a report, checked compact JSON); null if NULL. */
void sbx_jsonb_raw(SbxJsonb *b, const char *json);

/* Members: the key and the value at once. */
void sbx_jsonb_member_string(SbxJsonb *b, const char *key, const char *s);
void sbx_jsonb_member_int(SbxJsonb *b, const char *key, gint64 v);
void sbx_jsonb_member_uint(SbxJsonb *b, const char *key, guint64 v);
void sbx_jsonb_member_bool(SbxJsonb *b, const char *key, gboolean v);
void sbx_jsonb_member_raw(SbxJsonb *b, const char *key, const char *json);
