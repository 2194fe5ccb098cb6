/*
 * JSON Schema validation (see schema.h, docs/tools.md "Validation").
 *
 * The schema stays a cJSON tree; compiling checks every keyword value once, compiles every
 * regex, resolves every $ref to the node it points to, and rejects duplicate keywords (so each
 * keyword is looked up at most once per schema object while validating). Validation walks the
 * schema and the instance together, stops at the first failure, and pays for every piece of work
 * from a step budget, so cost is bounded whatever the schema and the instance are.
 *
 * Numbers are decided on their literals as exact decimals (protocol/json.h), never as doubles:
 * a 20-digit integer is an integer, 9007199254740993 is above 9007199254740992, and 0.0075 is a
 * multiple of 0.0001.
 */
#include "schema.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/json.h"
#include "protocol/limits.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* clang-format off */
G_DEFINE_QUARK(sbx-schema-error-quark, sbx_schema_error)
/* clang-format on */

/*
 * Nested schema applications in one validation (each subschema, $ref, anyOf branch, ...). A
 * legitimate walk nests at most schema depth + instance depth (32 + 32, cJSON's nesting limit)
 * plus a few $ref hops per level; 256 leaves room for that and stops a $ref loop such as
 * {"$ref": "#"} (which never consumes the instance) long before the stack is at risk.
 */
#define SCHEMA_DEPTH_MAX 256

/*
 * Work units per validation. A unit is one schema application, one keyword, one value compared,
 * 8 object members scanned or 64 string bytes measured: a few nanoseconds each (the whole budget
 * took 15 ms here), so it bounds a call to tens of milliseconds of the main loop. A 1 MiB input
 * of 100 000 integers against {"items": {"type": "integer", "minimum": 0}} uses ~300 000.
 */
#define SCHEMA_STEPS_MAX (4 * 1000 * 1000)

/*
 * PCRE2 limits, set through the pattern's start options (they can only lower the library's
 * defaults: ten million backtracks, 20 GB of backtracking memory). One match stops after a
 * million backtracks (about 10 ms: a catastrophic pattern such as ^(a+)+$ fails with an error
 * instead of running for minutes) or 64 MiB of backtracking frames (a group repeated a few
 * hundred thousand times still fits). A schema's own start options ("(*LIMIT_MATCH=...") could
 * raise these again, so patterns starting with "(*" are refused; ECMA-262 has no such syntax.
 */
#define SCHEMA_REGEX_PREFIX "(*LIMIT_MATCH=1000000)(*LIMIT_HEAP=65536)"

/*
 * Wall-clock cap on the time one validation spends matching regexes. PCRE2 does not report how
 * much of its limit a successful match used, so an instance of many strings that each take just
 * under the match limit (under "not", say) would cost items * 10 ms. Everything else is bounded
 * by the deterministic step budget; only regex matching is timed, so ordinary inputs never meet
 * this cap, even on a slow or loaded machine (200 ms is ~20 worst-case matches, thousands of
 * ordinary ones).
 */
#define SCHEMA_REGEX_TIME_MAX_US (200 * 1000)

/* Key names and quoted values in messages are cut to this many bytes: messages stay readable. */
#define SCHEMA_QUOTE_MAX 64

struct SbxSchema {
    cJSON *root;
    GHashTable *regexes; /* "pattern" string node or patternProperties member -> GRegex */
    GHashTable *refs;    /* "$ref" string node -> target node (inside root) */
};

/* ---- compiling ------------------------------------------------------------------------------ */

typedef struct {
    SbxSchema *s;
    guint depth;        /* nested compile_node() calls: schema nesting plus $ref hops */
    GHashTable *walked; /* schema nodes already checked (a $ref target is checked once) */
    GString *where;     /* schema location of the node being checked, for messages */
} Compiler;

static gboolean compile_node(Compiler *c, const cJSON *node, GError **error);

static gboolean schema_error(Compiler *c, GError **error, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

static gboolean schema_error(Compiler *c, GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, SBX_SCHEMA_ERROR, SBX_SCHEMA_ERROR_SCHEMA, "%s%s%s", c->where->str,
                c->where->len > 0 ? ": " : "", msg);
    return FALSE;
}

/*
 * Append `.key`, or `["odd key"]` (quoted, cut) for a key that is not an identifier, to @str
 * (no dot at the start of an empty @str if @first_no_dot). Returns the previous length.
 */
static gsize path_push_key(GString *str, const char *key, gboolean first_no_dot)
{
    gsize old = str->len;
    gboolean plain = key[0] != '\0' && !g_ascii_isdigit(key[0]);
    for (const char *p = key; *p != '\0'; p++) {
        plain = plain && (g_ascii_isalnum(*p) || *p == '_' || *p == '$');
    }
    if (plain && strlen(key) <= SCHEMA_QUOTE_MAX) {
        g_string_append_printf(str, "%s%s", old == 0 && first_no_dot ? "" : ".", key);
        return old;
    }
    /* JSON-style quoting: \" \\ and control characters escaped, UTF-8 kept as it is. */
    const char *p = key;
    g_string_append(str, "[\"");
    for (; *p != '\0' && p - key < SCHEMA_QUOTE_MAX; p++) {
        if (*p == '"' || *p == '\\') {
            g_string_append_printf(str, "\\%c", *p);
        } else if ((unsigned char)*p < 0x20) {
            g_string_append_printf(str, "\\u%04x", (unsigned)*p);
        } else {
            g_string_append_c(str, *p);
        }
    }
    while (*p != '\0' && ((unsigned char)*p & 0xc0) == 0x80) { /* finish a cut character */
        g_string_append_c(str, *p++);
    }
    g_string_append_printf(str, "%s\"]", *p != '\0' ? "..." : "");
    return old;
}

/*
 * ECMA-262's \d and \w are ASCII; GRegex compiles in PCRE2's UCP mode, where they match any
 * Unicode digit or letter (so "^\d+$" would accept "٣"). Spell them out as ASCII classes,
 * outside and inside [...]. \D and \W inside a class, and \b, keep PCRE's meaning.
 */
static char *ecma_classes(const char *pattern)
{
    GString *out = g_string_sized_new(strlen(pattern) + 16);
    gboolean in_class = FALSE;

    for (const char *p = pattern; *p != '\0'; p++) {
        if (*p == '\\' && p[1] != '\0') {
            const char *ascii = p[1] == 'd' ? "0-9" : p[1] == 'w' ? "A-Za-z0-9_" : NULL;
            const char *neg = p[1] == 'D' ? "[^0-9]" : p[1] == 'W' ? "[^A-Za-z0-9_]" : NULL;
            if (ascii != NULL) {
                g_string_append_printf(out, in_class ? "%s" : "[%s]", ascii);
            } else if (neg != NULL && !in_class) {
                g_string_append(out, neg);
            } else {
                g_string_append_len(out, p, 2);
            }
            p++;
            continue;
        }
        if (*p == '[' && !in_class) {
            in_class = TRUE;
            g_string_append_c(out, *p);
            /* PCRE: a ']' first in the class (after an optional '^') is a literal. */
            if (p[1] == '^') {
                g_string_append_c(out, *++p);
            }
            if (p[1] == ']') {
                g_string_append_c(out, *++p);
            }
            continue;
        }
        in_class = in_class && *p != ']';
        g_string_append_c(out, *p);
    }
    return g_string_free(out, FALSE);
}

static gboolean compile_regex(Compiler *c, const cJSON *key_node, const char *pattern,
                              GError **error)
{
    g_autoptr(GError) local = NULL;
    if (!g_utf8_validate(pattern, -1, NULL)) {
        return schema_error(c, error, "the pattern is not valid UTF-8");
    }
    if (g_str_has_prefix(pattern, "(*")) {
        return schema_error(c, error, "PCRE2 start-of-pattern options \"(*...)\" are not allowed");
    }
    g_autofree char *ecma = ecma_classes(pattern);
    g_autofree char *full = g_strconcat(SCHEMA_REGEX_PREFIX, ecma, NULL);
    /* ECMA-262 semantics where PCRE differs cheaply: `$` matches only at the very end. */
    GRegex *re = g_regex_new(full, G_REGEX_DOLLAR_ENDONLY, 0, &local);
    if (re == NULL) {
        /* GLib's message repeats the whole pattern (with our prefix): keep only the reason. */
        const char *why = g_strrstr(local->message, ": ");
        return schema_error(c, error, "invalid regular expression \"%.*s\": %s", SCHEMA_QUOTE_MAX,
                            pattern, why != NULL ? why + 2 : local->message);
    }
    g_hash_table_insert(c->s->regexes, (gpointer)key_node, re);
    return TRUE;
}

/* Decode one JSON-pointer token in place: ~1 -> '/', ~0 -> '~'. FALSE on another '~'. */
static gboolean pointer_unescape(char *tok)
{
    char *w = tok;
    for (const char *r = tok; *r != '\0'; r++) {
        if (*r == '~') {
            if (r[1] != '0' && r[1] != '1') {
                return FALSE;
            }
            *w++ = r[1] == '0' ? '~' : '/';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return TRUE;
}

static const cJSON *pointer_step(const cJSON *node, const char *tok)
{
    if (cJSON_IsObject(node)) {
        return cJSON_GetObjectItemCaseSensitive(node, tok);
    }
    if (!cJSON_IsArray(node) || tok[0] == '\0' || (tok[0] == '0' && tok[1] != '\0')) {
        return NULL;
    }
    for (const char *p = tok; *p != '\0'; p++) {
        if (!g_ascii_isdigit(*p) || p - tok > 6) {
            return NULL;
        }
    }
    return cJSON_GetArrayItem(node, atoi(tok));
}

/* The node that local reference @ref ("#", "#/a/b~1c", "#/%25x") names, or NULL. */
static const cJSON *resolve_ref(const cJSON *root, const char *ref)
{
    if (ref[0] != '#') {
        return NULL;
    }
    g_autofree char *frag = g_uri_unescape_string(ref + 1, NULL);
    if (frag == NULL || (frag[0] != '\0' && frag[0] != '/')) {
        return NULL;
    }
    const cJSON *node = root;
    g_auto(GStrv) toks = g_strsplit(frag, "/", -1);
    for (guint i = 1; toks[0] != NULL && toks[i] != NULL && node != NULL; i++) {
        node = pointer_unescape(toks[i]) ? pointer_step(node, toks[i]) : NULL;
    }
    return node;
}

static gboolean compile_ref(Compiler *c, const cJSON *v, GError **error)
{
    if (!cJSON_IsString(v)) {
        return schema_error(c, error, "expected a string");
    }
    const char *ref = v->valuestring;
    if (ref[0] != '#' || (ref[1] != '\0' && ref[1] != '/')) {
        return schema_error(c, error,
                            "\"%.*s\": only local references such as \"#/$defs/x\" are supported",
                            SCHEMA_QUOTE_MAX, ref);
    }
    const cJSON *target = resolve_ref(c->s->root, ref);
    if (target == NULL) {
        return schema_error(c, error, "\"%.*s\" does not name a part of this schema",
                            SCHEMA_QUOTE_MAX, ref);
    }
    g_hash_table_insert(c->s->refs, (gpointer)v, (gpointer)target);
    return compile_node(c, target, error);
}

static gboolean is_type_name(const cJSON *v)
{
    static const char *const names[] = {"null",   "boolean", "object",  "array",
                                        "number", "string",  "integer", NULL};
    return cJSON_IsString(v) && g_strv_contains(names, v->valuestring);
}

static gboolean compile_type(Compiler *c, const cJSON *v, GError **error)
{
    const cJSON *t;
    if (is_type_name(v)) {
        return TRUE;
    }
    if (cJSON_IsArray(v)) {
        cJSON_ArrayForEach(t, v)
        {
            if (!is_type_name(t)) {
                break;
            }
        }
        if (t == NULL) {
            return TRUE;
        }
    }
    return schema_error(c, error,
                        "expected a type name (null, boolean, object, array, number, "
                        "string, integer) or an array of them");
}

/* Check @m (a member of a schema object) against its child path @key. */
static gboolean compile_child(Compiler *c, const char *key, const cJSON *m, GError **error)
{
    gsize old = path_push_key(c->where, key, TRUE);
    gboolean ok = compile_node(c, m, error);
    g_string_truncate(c->where, old);
    return ok;
}

/* "properties" and friends: an object whose values are schemas. */
static gboolean compile_schema_map(Compiler *c, const cJSON *v, gboolean patterns, GError **error)
{
    const cJSON *m;

    if (!cJSON_IsObject(v)) {
        return schema_error(c, error, "expected an object of schemas");
    }
    cJSON_ArrayForEach(m, v)
    {
        if ((patterns && !compile_regex(c, m, m->string, error)) ||
            !compile_child(c, m->string, m, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* "allOf" and friends: an array of schemas (non-empty unless @may_be_empty). */
static gboolean compile_schema_list(Compiler *c, const cJSON *v, gboolean may_be_empty,
                                    GError **error)
{
    const cJSON *m;
    int i = 0;

    if (!cJSON_IsArray(v) || (!may_be_empty && cJSON_GetArraySize(v) == 0)) {
        return schema_error(c, error, "expected a%s array of schemas",
                            may_be_empty ? "n" : " non-empty");
    }
    cJSON_ArrayForEach(m, v)
    {
        gsize old = c->where->len;
        g_string_append_printf(c->where, "[%d]", i++);
        gboolean ok = compile_node(c, m, error);
        g_string_truncate(c->where, old);
        if (!ok) {
            return FALSE;
        }
    }
    return TRUE;
}

/* A non-negative integer (2.0 is one); at most 10^15, more than any instance can count. */
static gboolean is_count(const cJSON *v)
{
    int64_t n;
    return sbx_json_int64(v, &n) && n >= 0 && n <= 1000000000000000;
}

/*
 * multipleOf: a number above 0 whose significant digits fit the 64-bit remainder arithmetic of
 * sbx_decimal_multiple_of() (19 of them: 0.0001, 1.5 and 12345678901234567890 do).
 */
static gboolean compile_multiple_of(Compiler *c, const cJSON *v, GError **error)
{
    char buf[SBX_JSON_DOUBLE_BUF];
    SbxDecimal d;

    if (!sbx_decimal_of(v, buf, &d) || d.negative || d.n == 0) {
        return schema_error(c, error, "expected a number greater than 0");
    }
    if (d.n > 19) {
        return schema_error(c, error, "more than 19 significant digits are not supported");
    }
    return TRUE;
}

static gboolean compile_required(Compiler *c, const cJSON *v, GError **error)
{
    const cJSON *m;
    if (!cJSON_IsArray(v)) {
        return schema_error(c, error, "expected an array of property names");
    }
    cJSON_ArrayForEach(m, v)
    {
        if (!cJSON_IsString(m)) {
            return schema_error(c, error, "expected an array of property names");
        }
    }
    return TRUE;
}

/* Check the value @v of keyword @kw; unknown keywords are ignored, as the spec says. */
static gboolean compile_keyword(Compiler *c, const char *kw, const cJSON *v, GError **error)
{
    if (strcmp(kw, "type") == 0) {
        return compile_type(c, v, error);
    }
    if (strcmp(kw, "properties") == 0 || strcmp(kw, "$defs") == 0 ||
        strcmp(kw, "definitions") == 0) {
        return compile_schema_map(c, v, FALSE, error);
    }
    if (strcmp(kw, "patternProperties") == 0) {
        return compile_schema_map(c, v, TRUE, error);
    }
    if (strcmp(kw, "additionalProperties") == 0 || strcmp(kw, "additionalItems") == 0 ||
        strcmp(kw, "not") == 0 || (strcmp(kw, "items") == 0 && !cJSON_IsArray(v))) {
        return compile_node(c, v, error);
    }
    if (strcmp(kw, "items") == 0 || strcmp(kw, "prefixItems") == 0) {
        return compile_schema_list(c, v, TRUE, error);
    }
    if (strcmp(kw, "allOf") == 0 || strcmp(kw, "anyOf") == 0 || strcmp(kw, "oneOf") == 0) {
        return compile_schema_list(c, v, FALSE, error);
    }
    if (strcmp(kw, "required") == 0) {
        return compile_required(c, v, error);
    }
    if (strcmp(kw, "enum") == 0 && !cJSON_IsArray(v)) {
        return schema_error(c, error, "expected an array of values");
    }
    if ((strcmp(kw, "minimum") == 0 || strcmp(kw, "maximum") == 0) && !cJSON_IsNumber(v)) {
        return schema_error(c, error, "expected a number");
    }
    if ((strcmp(kw, "exclusiveMinimum") == 0 || strcmp(kw, "exclusiveMaximum") == 0) &&
        !cJSON_IsNumber(v) && !cJSON_IsBool(v)) {
        return schema_error(c, error, "expected a number (or a boolean, draft 4)");
    }
    if ((g_str_has_prefix(kw, "min") || g_str_has_prefix(kw, "max")) &&
        (g_str_has_suffix(kw, "Length") || g_str_has_suffix(kw, "Items") ||
         g_str_has_suffix(kw, "Properties")) &&
        !is_count(v)) {
        return schema_error(c, error, "expected a non-negative integer");
    }
    if (strcmp(kw, "multipleOf") == 0) {
        return compile_multiple_of(c, v, error);
    }
    if (strcmp(kw, "uniqueItems") == 0 && !cJSON_IsBool(v)) {
        return schema_error(c, error, "expected a boolean");
    }
    if (strcmp(kw, "pattern") == 0) {
        return cJSON_IsString(v) ? compile_regex(c, v, v->valuestring, error)
                                 : schema_error(c, error, "expected a string");
    }
    if (strcmp(kw, "$ref") == 0) {
        return compile_ref(c, v, error);
    }
    return TRUE;
}

/* Check the schema @node (object or boolean) and everything it applies, once. */
static gboolean compile_node(Compiler *c, const cJSON *node, GError **error)
{
    const cJSON *m;

    if (!g_hash_table_add(c->walked, (gpointer)node) || cJSON_IsBool(node)) {
        return TRUE;
    }
    if (!cJSON_IsObject(node)) {
        return schema_error(c, error, "expected a schema (an object or true/false)");
    }
    /* A chain of $refs to fresh nodes recurses once per hop: bound it like validation does. */
    if (c->depth >= SCHEMA_DEPTH_MAX) {
        return schema_error(c, error, "nested more than %d levels deep (through $ref)",
                            SCHEMA_DEPTH_MAX);
    }
    /* One keyword, one value (the parse refused duplicate names): validation looks each
     * keyword up once. */
    c->depth++;
    cJSON_ArrayForEach(m, node)
    {
        gsize old = path_push_key(c->where, m->string, TRUE);
        gboolean ok = compile_keyword(c, m->string, m, error);
        g_string_truncate(c->where, old);
        if (!ok) {
            c->depth--;
            return FALSE;
        }
    }
    c->depth--;
    return TRUE;
}

SbxSchema *sbx_schema_compile(const char *schema_json, GError **error)
{
    gsize len = strlen(schema_json);
    g_autofree char *why = NULL;

    if (len > SBX_SCHEMA_TEXT_MAX) {
        g_set_error(error, SBX_SCHEMA_ERROR, SBX_SCHEMA_ERROR_SCHEMA, "schema larger than %d bytes",
                    SBX_SCHEMA_TEXT_MAX);
        return NULL;
    }
    g_autoptr(SbxSchema) s = g_new0(SbxSchema, 1);
    s->regexes = g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)g_regex_unref);
    s->refs = g_hash_table_new(NULL, NULL);
    s->root = sbx_json_parse(schema_json, len, SBX_JSON_DEPTH_MAX, &why);
    if (s->root == NULL) {
        g_set_error(error, SBX_SCHEMA_ERROR, SBX_SCHEMA_ERROR_SCHEMA,
                    "schema is not one JSON value: %s", why != NULL ? why : "out of memory");
        return NULL;
    }
    Compiler c = {.s = s, .walked = g_hash_table_new(NULL, NULL), .where = g_string_new("")};
    gboolean ok = compile_node(&c, s->root, error);
    g_hash_table_destroy(c.walked);
    g_string_free(c.where, TRUE);
    return ok ? g_steal_pointer(&s) : NULL;
}

void sbx_schema_free(SbxSchema *schema)
{
    if (schema == NULL) {
        return;
    }
    g_hash_table_destroy(schema->regexes);
    g_hash_table_destroy(schema->refs);
    cJSON_Delete(schema->root);
    g_free(schema);
}

/* ---- validating ----------------------------------------------------------------------------- */

typedef struct {
    const SbxSchema *s;
    guint64 steps;
    gint64 regex_us; /* time spent matching regexes so far */
    guint depth;
    guint quiet;    /* > 0 inside anyOf/oneOf/not: failures are expected, no message */
    gboolean fatal; /* a limit ran out: the answer is "too complex", whatever branch we are in */
    char *msg;      /* the first failure (or the limit) */
    GString *path;  /* instance location, starting with the root name */
} Ctx;

static gboolean v_node(Ctx *c, const cJSON *sch, const cJSON *inst);

static gboolean too_complex(Ctx *c, const char *what)
{
    if (!c->fatal) {
        c->fatal = TRUE;
        g_free(c->msg);
        c->msg = g_strdup_printf("%s: %s", c->path->str, what);
    }
    return FALSE;
}

/* Pay @n units of work from the budget. */
static gboolean charge(Ctx *c, guint64 n)
{
    c->steps += n;
    if (c->steps > SCHEMA_STEPS_MAX) {
        return too_complex(c, "too much work to validate (schema or value too complex)");
    }
    return !c->fatal;
}

static gboolean fail(Ctx *c, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean fail(Ctx *c, const char *fmt, ...)
{
    if (c->quiet > 0 || c->msg != NULL) {
        return FALSE;
    }
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    c->msg = g_strdup_printf("%s: %s", c->path->str, text);
    return FALSE;
}

/* Member @key of object @obj, paying for the linear scan. */
static const cJSON *member(Ctx *c, const cJSON *obj, const char *key)
{
    if (obj == NULL || !charge(c, 1 + cJSON_GetArraySize(obj) / 8)) {
        return NULL;
    }
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int array_size(Ctx *c, const cJSON *arr)
{
    int n = cJSON_GetArraySize(arr);
    charge(c, 1 + n / 8);
    return n;
}

/* A value quoted in a message: compact JSON, cut. */
static char *quote(const cJSON *v)
{
    g_autofree char *text = sbx_json_print(v);
    if (text == NULL) {
        return g_strdup("(value)");
    }
    if (strlen(text) <= SCHEMA_QUOTE_MAX) {
        return g_strdup(text);
    }
    const char *end = text;
    while (end - text < SCHEMA_QUOTE_MAX) {
        end = g_utf8_next_char(end);
    }
    return g_strdup_printf("%.*s...", (int)(end - text), text);
}

/* The exact decimal of number node @v. Parsed nodes always have one; a node made in memory has
 * one unless it is not finite (never: nothing here makes numbers). */
static SbxDecimal decimal(const cJSON *v, char *buf)
{
    SbxDecimal d;
    if (!sbx_decimal_of(v, buf, &d)) {
        memset(&d, 0, sizeof(d)); /* as zero */
    }
    return d;
}

/* Two numbers are equal when their values are (1, 1.0 and 10e-1 are one value). */
static gboolean numbers_equal(Ctx *c, const cJSON *a, const cJSON *b)
{
    char ba[SBX_JSON_DOUBLE_BUF], bb[SBX_JSON_DOUBLE_BUF];
    SbxDecimal da = decimal(a, ba), db = decimal(b, bb);
    return charge(c, 1 + (da.n + db.n) / 64) && sbx_decimal_compare(&da, &db) == 0;
}

static gboolean json_equal(Ctx *c, const cJSON *a, const cJSON *b)
{
    const cJSON *m;
    if (!charge(c, 1) || (a->type & 0xff) != (b->type & 0xff)) {
        return FALSE;
    }
    switch (a->type & 0xff) {
    case cJSON_Number:
        return numbers_equal(c, a, b);
    case cJSON_String:
        return strcmp(a->valuestring, b->valuestring) == 0;
    case cJSON_Array:
        for (a = a->child, b = b->child; a != NULL && b != NULL; a = a->next, b = b->next) {
            if (!json_equal(c, a, b)) {
                return FALSE;
            }
        }
        return a == NULL && b == NULL;
    case cJSON_Object:
        if (array_size(c, a) != array_size(c, b)) {
            return FALSE;
        }
        cJSON_ArrayForEach(m, a)
        {
            const cJSON *other = member(c, b, m->string);
            if (other == NULL || !json_equal(c, m, other)) {
                return FALSE;
            }
        }
        return TRUE;
    default: /* null, true, false: the type says it all */
        return TRUE;
    }
}

static const char *kind_of(const cJSON *v)
{
    if (cJSON_IsNull(v)) {
        return "null";
    }
    if (cJSON_IsBool(v)) {
        return "a boolean";
    }
    if (cJSON_IsObject(v)) {
        return "an object";
    }
    if (cJSON_IsArray(v)) {
        return "an array";
    }
    return cJSON_IsNumber(v) ? "a number" : "a string";
}

/* JSON Schema's integer: a number without a fractional part, 1.0 and 1e400 included. */
static gboolean is_integer(const cJSON *v)
{
    char buf[SBX_JSON_DOUBLE_BUF];
    SbxDecimal d;
    return sbx_decimal_of(v, buf, &d) && sbx_decimal_is_integer(&d);
}

static gboolean type_matches(const char *t, const cJSON *v)
{
    if (strcmp(t, "integer") == 0) {
        return is_integer(v);
    }
    if (strcmp(t, "number") == 0) {
        return cJSON_IsNumber(v);
    }
    if (strcmp(t, "null") == 0) {
        return cJSON_IsNull(v);
    }
    const char *k = kind_of(v);
    return strcmp(k, "null") != 0 && strcmp(strchr(k, ' ') + 1, t) == 0;
}

static const char *article(const char *t)
{
    if (strcmp(t, "null") == 0) {
        return "";
    }
    return t[0] == 'a' || t[0] == 'i' || t[0] == 'o' ? "an " : "a ";
}

static gboolean v_type(Ctx *c, const cJSON *t, const cJSON *inst)
{
    const cJSON *m;
    if (cJSON_IsString(t)) {
        return type_matches(t->valuestring, inst) ||
               fail(c, "expected %s%s, got %s", article(t->valuestring), t->valuestring,
                    kind_of(inst));
    }
    g_autoptr(GString) want = g_string_new("");
    int n = cJSON_GetArraySize(t), i = 0;
    cJSON_ArrayForEach(m, t)
    {
        if (type_matches(m->valuestring, inst)) {
            return TRUE;
        }
        g_string_append_printf(want, "%s%s%s",
                               i == 0       ? ""
                               : i == n - 1 ? " or "
                                            : ", ",
                               article(m->valuestring), m->valuestring);
        i++;
    }
    return fail(c, "expected %s, got %s", n > 0 ? want->str : "no value", kind_of(inst));
}

static gboolean v_enum(Ctx *c, const cJSON *e, const cJSON *inst)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, e)
    {
        if (json_equal(c, m, inst)) {
            return TRUE;
        }
    }
    if (c->fatal || c->quiet > 0) {
        return FALSE; /* no message wanted: do not print the enum */
    }
    g_autofree char *allowed = quote(e);
    return fail(c, "expected one of %s", allowed);
}

static gboolean v_const(Ctx *c, const cJSON *k, const cJSON *inst)
{
    if (json_equal(c, k, inst)) {
        return TRUE;
    }
    if (c->fatal || c->quiet > 0) {
        return FALSE;
    }
    g_autofree char *want = quote(k);
    return fail(c, "expected the value %s", want);
}

/* minimum/maximum (with draft 4's boolean exclusive* siblings) and the number forms. */
static gboolean v_bound(Ctx *c, const cJSON *sch, const char *kw, const cJSON *bound,
                        const cJSON *inst)
{
    gboolean upper = strstr(kw, "aximum") != NULL;
    gboolean exclusive = g_str_has_prefix(kw, "exclusive");
    char bb[SBX_JSON_DOUBLE_BUF], bx[SBX_JSON_DOUBLE_BUF];
    SbxDecimal b = decimal(bound, bb), x = decimal(inst, bx);

    if (!exclusive) {
        const cJSON *flag = member(c, sch, upper ? "exclusiveMaximum" : "exclusiveMinimum");
        exclusive = cJSON_IsTrue(flag);
    }
    if (!charge(c, 1 + (b.n + x.n) / 64)) {
        return FALSE;
    }
    int cmp = sbx_decimal_compare(&x, &b);
    gboolean ok = upper ? (exclusive ? cmp < 0 : cmp <= 0) : (exclusive ? cmp > 0 : cmp >= 0);
    if (ok || c->quiet > 0) {
        return ok;
    }
    g_autofree char *want = quote(bound);
    g_autofree char *got = quote(inst);
    return fail(c, "expected a number %s %s, got %s",
                upper ? (exclusive ? "<" : "<=") : (exclusive ? ">" : ">="), want, got);
}

/* multipleOf, exactly: the quotient of the two decimals is an integer (0.0075 of 0.0001). */
static gboolean v_multiple(Ctx *c, const cJSON *m, const cJSON *inst)
{
    char bm[SBX_JSON_DOUBLE_BUF], bx[SBX_JSON_DOUBLE_BUF];
    SbxDecimal dm = decimal(m, bm), dx = decimal(inst, bx);

    if (!charge(c, 1 + dx.n / 16)) { /* a 128-bit remainder step per digit */
        return FALSE;
    }
    /* Compiling refused a multipleOf of more than 19 digits, so the answer is 0 or 1. */
    if (sbx_decimal_multiple_of(&dx, &dm) == 1) {
        return TRUE;
    }
    if (c->quiet > 0) {
        return FALSE;
    }
    g_autofree char *want = quote(m);
    g_autofree char *got = quote(inst);
    return fail(c, "expected a multiple of %s, got %s", want, got);
}

static gboolean v_pattern(Ctx *c, const cJSON *key_node, const char *text)
{
    GRegex *re = g_hash_table_lookup(c->s->regexes, key_node);
    g_autoptr(GError) error = NULL;

    if (!charge(c, 1 + strlen(text) / 64)) {
        return FALSE;
    }
    if (!g_utf8_validate(text, -1, NULL)) {
        return FALSE;
    }
    gint64 t0 = g_get_monotonic_time();
    gboolean hit = g_regex_match_full(re, text, -1, 0, 0, NULL, &error);
    c->regex_us += g_get_monotonic_time() - t0;
    if (error != NULL || c->regex_us > SCHEMA_REGEX_TIME_MAX_US) {
        return too_complex(c, "regular expressions too expensive to match");
    }
    return hit;
}

static gboolean v_string(Ctx *c, const char *kw, const cJSON *v, const cJSON *inst)
{
    const char *text = inst->valuestring;
    if (strcmp(kw, "pattern") == 0) {
        return v_pattern(c, v, text) || (!c->fatal && fail(c, "does not match the pattern \"%.*s\"",
                                                           SCHEMA_QUOTE_MAX, v->valuestring));
    }
    gsize bytes = strlen(text);
    if (!charge(c, 1 + bytes / 64)) {
        return FALSE;
    }
    /* Code points, as the spec says, not bytes or UTF-16 units. */
    double n = g_utf8_validate(text, bytes, NULL) ? (double)g_utf8_strlen(text, bytes) : bytes;
    if (strcmp(kw, "minLength") == 0 && n < v->valuedouble) {
        return fail(c, "expected at least %.0f characters, got %.0f", v->valuedouble, n);
    }
    if (strcmp(kw, "maxLength") == 0 && n > v->valuedouble) {
        return fail(c, "expected at most %.0f characters, got %.0f", v->valuedouble, n);
    }
    return TRUE;
}

/* Validate @inst[i] against @sch, with "[i]" on the path. */
static gboolean v_item(Ctx *c, const cJSON *sch, const cJSON *item, int i)
{
    gsize old = c->path->len;
    g_string_append_printf(c->path, "[%d]", i);
    gboolean ok = v_node(c, sch, item);
    g_string_truncate(c->path, old);
    return ok;
}

/* items / prefixItems / additionalItems: item i gets tuple[i], then @rest (NULL: anything). */
static gboolean v_items_from(Ctx *c, const cJSON *tuple, const cJSON *rest, int skip,
                             const cJSON *inst)
{
    const cJSON *t = tuple != NULL ? tuple->child : NULL;
    const cJSON *item;
    int i = 0;

    cJSON_ArrayForEach(item, inst)
    {
        const cJSON *sch = i < skip ? NULL : t != NULL ? t : rest;
        if (i >= skip && t != NULL) {
            t = t->next;
        }
        if (sch != NULL && !v_item(c, sch, item, i)) {
            return FALSE;
        }
        i++;
    }
    return TRUE;
}

static gboolean v_unique(Ctx *c, const cJSON *inst)
{
    int i = 0;
    for (const cJSON *a = inst->child; a != NULL; a = a->next, i++) {
        int j = i + 1;
        for (const cJSON *b = a->next; b != NULL; b = b->next, j++) {
            if (json_equal(c, a, b)) {
                return fail(c, "items %d and %d are equal (uniqueItems)", i, j);
            }
            if (c->fatal) {
                return FALSE;
            }
        }
    }
    return TRUE;
}

static gboolean v_array(Ctx *c, const cJSON *sch, const char *kw, const cJSON *v, const cJSON *inst)
{
    if (strcmp(kw, "items") == 0 && cJSON_IsArray(v)) { /* before 2020-12: a tuple */
        return v_items_from(c, v, member(c, sch, "additionalItems"), 0, inst);
    }
    if (strcmp(kw, "items") == 0) {
        const cJSON *prefix = member(c, sch, "prefixItems");
        return v_items_from(c, NULL, v, cJSON_IsArray(prefix) ? array_size(c, prefix) : 0, inst);
    }
    if (strcmp(kw, "prefixItems") == 0) {
        return v_items_from(c, v, NULL, 0, inst);
    }
    if (strcmp(kw, "uniqueItems") == 0) {
        return !cJSON_IsTrue(v) || v_unique(c, inst);
    }
    if (strcmp(kw, "minItems") != 0 && strcmp(kw, "maxItems") != 0) {
        return TRUE;
    }
    int n = array_size(c, inst);
    if (strcmp(kw, "minItems") == 0 && n < v->valuedouble) {
        return fail(c, "expected at least %.0f items, got %d", v->valuedouble, n);
    }
    if (strcmp(kw, "maxItems") == 0 && n > v->valuedouble) {
        return fail(c, "expected at most %.0f items, got %d", v->valuedouble, n);
    }
    return TRUE;
}

/* Validate property @m of the object at the path, with ".key" on the path. */
static gboolean v_property(Ctx *c, const cJSON *sch, const cJSON *m)
{
    gsize old = path_push_key(c->path, m->string, FALSE);
    gboolean ok = v_node(c, sch, m);
    g_string_truncate(c->path, old);
    return ok;
}

static gboolean matches_some_pattern(Ctx *c, const cJSON *pattern_props, const char *key)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, pattern_props)
    {
        if (v_pattern(c, p, key)) {
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean v_additional(Ctx *c, const cJSON *sch, const cJSON *v, const cJSON *inst)
{
    const cJSON *props = member(c, sch, "properties");
    const cJSON *patterns = member(c, sch, "patternProperties");
    const cJSON *m;

    cJSON_ArrayForEach(m, inst)
    {
        if (!charge(c, 1) || member(c, props, m->string) != NULL ||
            matches_some_pattern(c, patterns, m->string)) {
            if (c->fatal) {
                return FALSE;
            }
            continue;
        }
        if (cJSON_IsFalse(v)) {
            g_autofree char *key = g_strdup_printf("%.*s", SCHEMA_QUOTE_MAX, m->string);
            return fail(c, "unknown property \"%s\"", key);
        }
        if (!v_property(c, v, m)) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean v_properties(Ctx *c, const cJSON *props, const cJSON *inst)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, props)
    {
        const cJSON *m = member(c, inst, p->string);
        if ((m != NULL && !v_property(c, p, m)) || c->fatal) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean v_pattern_properties(Ctx *c, const cJSON *patterns, const cJSON *inst)
{
    const cJSON *m, *p;
    cJSON_ArrayForEach(m, inst)
    {
        cJSON_ArrayForEach(p, patterns)
        {
            if ((v_pattern(c, p, m->string) && !v_property(c, p, m)) || c->fatal) {
                return FALSE;
            }
        }
    }
    return TRUE;
}

static gboolean v_required(Ctx *c, const cJSON *names, const cJSON *inst)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, names)
    {
        if (member(c, inst, p->valuestring) == NULL) {
            return !c->fatal &&
                   fail(c, "missing required property \"%.*s\"", SCHEMA_QUOTE_MAX, p->valuestring);
        }
    }
    return TRUE;
}

static gboolean v_object(Ctx *c, const cJSON *sch, const char *kw, const cJSON *v,
                         const cJSON *inst)
{
    if (strcmp(kw, "properties") == 0) {
        return v_properties(c, v, inst);
    }
    if (strcmp(kw, "patternProperties") == 0) {
        return v_pattern_properties(c, v, inst);
    }
    if (strcmp(kw, "additionalProperties") == 0) {
        return v_additional(c, sch, v, inst);
    }
    if (strcmp(kw, "required") == 0) {
        return v_required(c, v, inst);
    }
    if (strcmp(kw, "minProperties") != 0 && strcmp(kw, "maxProperties") != 0) {
        return TRUE;
    }
    int n = array_size(c, inst);
    if (strcmp(kw, "minProperties") == 0 && n < v->valuedouble) {
        return fail(c, "expected at least %.0f properties, got %d", v->valuedouble, n);
    }
    if (strcmp(kw, "maxProperties") == 0 && n > v->valuedouble) {
        return fail(c, "expected at most %.0f properties, got %d", v->valuedouble, n);
    }
    return TRUE;
}

/* anyOf, oneOf, not: branches that may fail without a message. */
static gboolean v_branches(Ctx *c, const char *kw, const cJSON *v, const cJSON *inst)
{
    const cJSON *b;
    int i = 0, hits = 0, first = -1;

    c->quiet++;
    if (strcmp(kw, "not") == 0) {
        hits = v_node(c, v, inst);
    } else {
        cJSON_ArrayForEach(b, v)
        {
            if (v_node(c, b, inst)) {
                first = hits++ == 0 ? i : first;
                if (kw[0] == 'a' || hits > 1) {
                    break; /* anyOf: one is enough; oneOf: two are too many */
                }
            }
            if (c->fatal) {
                break;
            }
            i++;
        }
    }
    c->quiet--;
    if (c->fatal) {
        return FALSE;
    }
    if (kw[0] == 'n') {
        return !hits || fail(c, "must not match the schema in \"not\"");
    }
    if (hits == 0) {
        return fail(c, "does not match any of the schemas in %s", kw);
    }
    return kw[0] == 'a' || hits == 1 ||
           fail(c, "matches more than one of the schemas in oneOf (%d and %d)", first, i);
}

static gboolean v_keyword(Ctx *c, const cJSON *sch, const cJSON *m, const cJSON *inst)
{
    const char *kw = m->string;
    const cJSON *b;

    if (strcmp(kw, "$ref") == 0) {
        const cJSON *target = g_hash_table_lookup(c->s->refs, m);
        g_assert(target != NULL); /* compiling resolved every $ref it can reach */
        return v_node(c, target, inst);
    }
    if (strcmp(kw, "type") == 0) {
        return v_type(c, m, inst);
    }
    if (strcmp(kw, "enum") == 0) {
        return v_enum(c, m, inst);
    }
    if (strcmp(kw, "const") == 0) {
        return v_const(c, m, inst);
    }
    if (strcmp(kw, "allOf") == 0) {
        cJSON_ArrayForEach(b, m)
        {
            if (!v_node(c, b, inst)) {
                return FALSE;
            }
        }
        return TRUE;
    }
    if (strcmp(kw, "anyOf") == 0 || strcmp(kw, "oneOf") == 0 || strcmp(kw, "not") == 0) {
        return v_branches(c, kw, m, inst);
    }
    if (cJSON_IsNumber(inst) && strcmp(kw, "multipleOf") == 0) {
        return v_multiple(c, m, inst);
    }
    if (cJSON_IsNumber(inst) && cJSON_IsNumber(m) &&
        (strstr(kw, "inimum") != NULL || strstr(kw, "aximum") != NULL)) {
        return v_bound(c, sch, kw, m, inst);
    }
    if (cJSON_IsString(inst) && (strcmp(kw, "pattern") == 0 || strcmp(kw, "minLength") == 0 ||
                                 strcmp(kw, "maxLength") == 0)) {
        return v_string(c, kw, m, inst);
    }
    if (cJSON_IsArray(inst)) {
        return v_array(c, sch, kw, m, inst);
    }
    if (cJSON_IsObject(inst)) {
        return v_object(c, sch, kw, m, inst);
    }
    return TRUE;
}

/* Apply schema @sch (object or boolean) to @inst. */
static gboolean v_node(Ctx *c, const cJSON *sch, const cJSON *inst)
{
    const cJSON *m;
    gboolean ok = TRUE;

    if (!charge(c, 1)) {
        return FALSE;
    }
    if (cJSON_IsBool(sch)) {
        return cJSON_IsTrue(sch) || fail(c, "no value is allowed here");
    }
    if (c->depth >= SCHEMA_DEPTH_MAX) {
        return too_complex(c, "schema applied too deeply (a $ref loop?)");
    }
    c->depth++;
    cJSON_ArrayForEach(m, sch)
    {
        if (!charge(c, 1) || !v_keyword(c, sch, m, inst)) {
            ok = FALSE;
            break;
        }
    }
    c->depth--;
    return ok && !c->fatal;
}

gboolean sbx_schema_validate(const SbxSchema *schema, const char *root, const char *instance_json,
                             GError **error)
{
    gsize len = strlen(instance_json);
    g_autofree char *why = NULL;

    if (len > SBX_SCHEMA_INSTANCE_MAX) {
        g_set_error(error, SBX_SCHEMA_ERROR, SBX_SCHEMA_ERROR_TOO_COMPLEX,
                    "%s: larger than %d bytes", root, SBX_SCHEMA_INSTANCE_MAX);
        return FALSE;
    }
    g_autoptr(cJSON) inst = sbx_json_parse(instance_json, len, SBX_JSON_DEPTH_MAX, &why);
    if (inst == NULL) {
        g_set_error(error, SBX_SCHEMA_ERROR, SBX_SCHEMA_ERROR_JSON, "%s: not one JSON value: %s",
                    root, why != NULL ? why : "out of memory");
        return FALSE;
    }
    Ctx c = {.s = schema, .path = g_string_new(root)};
    gboolean ok = v_node(&c, schema->root, inst);
    if (!ok) {
        g_set_error_literal(error, SBX_SCHEMA_ERROR,
                            c.fatal ? SBX_SCHEMA_ERROR_TOO_COMPLEX : SBX_SCHEMA_ERROR_INVALID,
                            c.msg != NULL ? c.msg : "does not match the schema");
    }
    g_free(c.msg);
    g_string_free(c.path, TRUE);
    return ok;
}
