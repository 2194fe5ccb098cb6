/*
 * A tool call's input as a person reads it before answering an approval: on the terminal of a
 * direct `sandbox run` (prompt.c) and in `sandbox approvals` (approvals.c). The whole JSON text,
 * never cut: pretty-printed, made safe for a terminal (escape.h: a string may hold DEL or C1
 * controls raw, and a server's excerpt or a broken text anything), and folded to the terminal's
 * width. Pure: no I/O.
 */
#pragma once

#include <glib.h>

/*
 * Levels of indentation shown; deeper levels are shown at this one. Valid input nests at most
 * 32 levels (SBX_JSON_DEPTH_MAX), but the view also takes text that is no JSON, and an
 * indentation that grew with "[[[[..." would make the view quadratic in the input.
 */
#define SBX_INPUT_VIEW_INDENT_MAX 16

/* Columns for the text after the prefix, at least: a fold narrower helps nobody. */
#define SBX_INPUT_VIEW_WIDTH_MIN 20

/**
 * The JSON text @json (@len bytes; not checked: a cut or broken text is shown as it is)
 * pretty-printed (two spaces per level, one member or element per line; whitespace outside
 * strings is laid out anew, every other byte kept), escaped with SBX_ESCAPE_TEXT, and folded:
 * each line starts with @prefix and is at most @width display columns long, prefix included
 * (@width 0: not folded). Every line ends with "\n". *@ret_lines (may be NULL) is their number.
 */
char *sbx_input_view(const char *json, gsize len, guint width, const char *prefix,
                     guint *ret_lines);

/** Display columns of the valid UTF-8 @text (a wide character counts two, a combining one 0). */
guint sbx_input_view_columns(const char *text);
