/*
 * Bytes from a guest (or anything else untrusted) made harmless for a terminal: control
 * characters are shown, never obeyed (docs/cli.md, "Output: slow readers and terminals").
 *
 * Escaped: C0 controls except \n and \t (so also \r, which would let a line overwrite the one
 * before, and ESC, which starts every terminal command), DEL, and the C1 controls U+0080..U+009F
 * (8-bit terminal commands such as CSI U+009B, which some terminals obey in UTF-8 too). Bytes
 * that are not UTF-8 are shown as their values. Valid UTF-8 text passes unchanged, so a program's
 * output reads as it would elsewhere. A backslash is not escaped: the result is for people to
 * read, not to decode.
 *
 * Streaming: an escaper keeps the start of a UTF-8 sequence that ends a chunk until the next
 * chunk completes it (or shows it was invalid), so how the bytes were cut into chunks never
 * changes the result. Pure: no I/O.
 */
#pragma once

#include <glib.h>

typedef enum {
    /* For text: `\x1b` for C0 controls, DEL and invalid bytes, `\u009b` for C1 controls. */
    SBX_ESCAPE_TEXT,
    /*
     * For JSON text: `\u001b`, `\u007f`, `\u009b`, and `\ufffd` for an invalid byte. Inside a
     * JSON string these are escapes of the same characters, so the value does not change (the
     * printer leaves DEL and C1 raw). A CR becomes a space: valid JSON holds one only as
     * whitespace between tokens, and no other raw C0 control but \n and \t at all.
     */
    SBX_ESCAPE_JSON,
} SbxEscapeMode;

typedef struct {
    SbxEscapeMode mode;
    guint8 held[4]; /* the start of a UTF-8 sequence the next chunk may complete */
    guint8 n_held;
    guint8 need; /* the length of that sequence */
} SbxEscaper;

/** Start a stream of bytes to escape with @mode. */
void sbx_escaper_init(SbxEscaper *e, SbxEscapeMode mode);

/**
 * Append @data (@len bytes, the next chunk of the stream) to @out, escaped. The end of an
 * incomplete UTF-8 sequence may be held back until the next call.
 */
void sbx_escaper_feed(SbxEscaper *e, const guint8 *data, gsize len, GString *out);

/** The stream ended: append what is held (an incomplete sequence: invalid bytes) to @out. */
void sbx_escaper_finish(SbxEscaper *e, GString *out);

/** @text (@len bytes, -1: NUL-terminated) escaped whole with @mode, as a new string. */
char *sbx_escape(const char *text, gssize len, SbxEscapeMode mode);
