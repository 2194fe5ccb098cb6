/*
 * Exact JSON: the strict parse that keeps every number's literal, the printer that prints it,
 * and the text helpers that forward a value as the bytes it came as (json.h).
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-check.h"

/* ---- parsing -------------------------------------------------------------------------------- */

/* A read position in JSON text that has passed sbx_json_prescan() and cJSON. */
typedef struct {
    const char *s;
    size_t len;
    size_t i;
} Cursor;

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_space(const Cursor *c, size_t i)
{
    while (i < c->len && is_space(c->s[i]))
        i++;
    return i;
}

/* @i on the opening quote of a string: the index after its closing quote. */
static size_t skip_string(const Cursor *c, size_t i)
{
    for (i++; i < c->len && c->s[i] != '"'; i++)
        if (c->s[i] == '\\')
            i++;
    return i + 1;
}

static bool ends_scalar(char ch)
{
    return is_space(ch) || ch == ',' || ch == ']' || ch == '}';
}

/* @i on the first byte of a value: the index after its last byte. */
static size_t skip_value(const Cursor *c, size_t i)
{
    int depth = 0;

    if (c->s[i] == '"')
        return skip_string(c, i);
    if (c->s[i] != '{' && c->s[i] != '[') {
        while (i < c->len && !ends_scalar(c->s[i])) /* a number, true, false, null */
            i++;
        return i;
    }
    while (i < c->len) {
        char ch = c->s[i];

        if (ch == '"') {
            i = skip_string(c, i);
            continue;
        }
        i++;
        if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && --depth == 0)
            break;
    }
    return i;
}

typedef struct {
    const char *name;
    size_t at; /* byte of the name's opening quote */
} Name;

static int cmp_names(const void *a, const void *b)
{
    const Name *x = a, *y = b;
    int r = strcmp(x->name, y->name);

    return r ? r : x->at < y->at ? -1 : 1;
}

/* The byte of the first repeated name of @names (@n of them, sorted here), or SIZE_MAX. */
static size_t first_repeat(Name *names, size_t n)
{
    size_t at = SIZE_MAX;

    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1].name, names[i].name) == 0 && names[i].at < at)
            at = names[i].at;
    return at;
}

static int walk(cJSON *item, Cursor *c, char **why);

/* The members or elements of @item, the cursor past its '{' or '['. */
static int walk_children(cJSON *item, Cursor *c, char **why)
{
    bool object = cJSON_IsObject(item);
    Name *names = NULL;
    size_t n = 0, at;
    int r = 0;

    if (object && item->child && !(names = malloc(cJSON_GetArraySize(item) * sizeof(*names))))
        return -ENOMEM;
    for (cJSON *child = item->child; child && r == 0; child = child->next) {
        c->i = skip_space(c, c->i);
        if (object) {
            names[n++] = (Name){child->string, c->i};
            c->i = skip_space(c, skip_string(c, c->i)) + 1; /* past the ':' */
        }
        r = walk(child, c, why);
        c->i = skip_space(c, c->i);
        if (c->i < c->len && c->s[c->i] == ',')
            c->i++;
    }
    c->i = skip_space(c, c->i) + 1; /* past the '}' or ']' */
    if (r == 0 && n > 1 && (at = first_repeat(names, n)) != SIZE_MAX) {
        *why = sbx_strdup_printf("byte %zu: duplicate member name", at);
        r = *why ? -EBADMSG : -ENOMEM;
    }
    free(names);
    return r;
}

/*
 * Walk the text of @item (valid JSON that cJSON parsed into @item) beside the tree: give each
 * number node its literal, and refuse an object with two members of one name (I-JSON, RFC
 * 7493: two readers of one message must not see different values), at the byte of the second.
 * Recursion is bounded by the nesting the prescan allowed. Returns 0, -ENOMEM, or -EBADMSG
 * with *@why set.
 */
static int walk(cJSON *item, Cursor *c, char **why)
{
    size_t start = c->i = skip_space(c, c->i);

    if (cJSON_IsArray(item) || cJSON_IsObject(item)) {
        c->i++;
        return walk_children(item, c, why);
    }
    c->i = skip_value(c, c->i);
    if (cJSON_IsNumber(item)) {
        item->valuestring = strndup(c->s + start, c->i - start);
        if (!item->valuestring)
            return -ENOMEM;
    }
    return 0;
}

static cJSON *parse_fail(char **ret_error, char *why)
{
    if (ret_error)
        *ret_error = why;
    else
        free(why);
    return NULL;
}

cJSON *sbx_json_parse(const char *text, size_t len, int max_depth, char **ret_error)
{
    Cursor c = {.s = text, .len = len};
    const char *end = NULL;
    char *copy, *why = NULL;
    cJSON *root;
    int r;

    if (ret_error)
        *ret_error = NULL;
    if (!sbx_json_prescan(text, len, max_depth, &why))
        return parse_fail(ret_error, why);
    /* A NUL-terminated copy: cJSON never reads past our buffer, whatever its length checks. */
    copy = malloc(len + 1);
    if (!copy)
        return NULL;
    memcpy(copy, text, len);
    copy[len] = '\0';
    root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
    if (root) /* only whitespace may follow the value */
        end = copy + skip_space(&c, (size_t)(end - copy));
    if (!root || end != copy + len) {
        why = sbx_strdup_printf("byte %td: %s", end ? end - copy : 0,
                                root ? "text after the JSON value" : "invalid JSON");
        cJSON_Delete(root);
        free(copy);
        return parse_fail(ret_error, why);
    }
    free(copy);
    r = walk(root, &c, &why);
    if (r < 0) {
        cJSON_Delete(root);
        return parse_fail(ret_error, why);
    }
    return root;
}

const char *sbx_json_error_where(const char *text, size_t len, const char *why, unsigned *ret_line,
                                 unsigned *ret_col)
{
    size_t at = 0;
    int skip = 0;

    *ret_line = *ret_col = 0;
    if (sscanf(why, "byte %zu: %n", &at, &skip) != 1 || skip == 0 || at > len)
        return why;
    *ret_line = *ret_col = 1;
    for (size_t i = 0; i < at; i++) {
        *ret_line += text[i] == '\n';
        *ret_col = text[i] == '\n' ? 1 : *ret_col + 1;
    }
    return why + skip;
}

const char *sbx_json_number_text(const cJSON *item)
{
    return cJSON_IsNumber(item) ? item->valuestring : NULL;
}

/* ---- text helpers --------------------------------------------------------------------------- */

char *sbx_json_minify(const char *text, size_t len)
{
    char *out = malloc(len + 1);
    bool in_string = false;
    size_t n = 0;

    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];

        if (in_string) {
            if (ch == '\\' && i + 1 < len) {
                out[n++] = ch;
                ch = text[++i];
            } else if (ch == '"') {
                in_string = false;
            }
        } else if (ch == '"') {
            in_string = true;
        } else if (is_space(ch)) {
            continue;
        }
        out[n++] = ch;
    }
    out[n] = '\0';
    return out;
}

char *sbx_json_normalize(const char *text, size_t len, int max_depth, char **ret_error)
{
    cJSON *v = sbx_json_parse(text, len, max_depth, ret_error);

    if (!v)
        return NULL;
    cJSON_Delete(v);
    return sbx_json_minify(text, len);
}

char *sbx_json_member_text(const char *text, size_t len, const cJSON *root, const cJSON *member)
{
    Cursor c = {.s = text, .len = len};
    const cJSON *m;
    size_t index = 0, i;

    cJSON_ArrayForEach(m, root)
    {
        if (m == member)
            break;
        index++;
    }
    if (!m || !cJSON_IsObject(root))
        return NULL;
    i = skip_space(&c, 0) + 1; /* past the '{' */
    for (size_t k = 0;; k++) {
        size_t start;

        i = skip_string(&c, skip_space(&c, i));    /* the name */
        i = skip_space(&c, skip_space(&c, i) + 1); /* past the ':' */
        start = i;
        i = skip_value(&c, i);
        if (k == index)
            return sbx_json_minify(text + start, i - start);
        i = skip_space(&c, i) + 1; /* past the ',' */
    }
}

/* The child indices from @node down to @item into @path (at most @max); the depth, or -1. */
static int find_path(const cJSON *node, const cJSON *item, size_t *path, int depth, int max)
{
    const cJSON *child;
    size_t k = 0;

    if (node == item)
        return depth;
    if (depth == max)
        return -1;
    cJSON_ArrayForEach(child, node)
    {
        int found;

        path[depth] = k++;
        found = find_path(child, item, path, depth + 1, max);
        if (found >= 0)
            return found;
    }
    return -1;
}

char *sbx_json_item_text(const char *text, size_t len, const cJSON *root, const cJSON *item)
{
    Cursor c = {.s = text, .len = len};
    size_t path[SBX_JSON_PRINT_DEPTH_MAX];
    int depth = find_path(root, item, path, 0, SBX_JSON_PRINT_DEPTH_MAX);
    size_t i = skip_space(&c, 0);

    if (depth < 0)
        return NULL;
    for (int d = 0; d < depth; d++) {
        bool object = text[i] == '{';

        i++; /* past the '{' or '[' */
        for (size_t k = 0;; k++) {
            i = skip_space(&c, i);
            if (object) {
                i = skip_string(&c, i);                    /* the name */
                i = skip_space(&c, skip_space(&c, i) + 1); /* past the ':' */
            }
            if (k == path[d])
                break;
            i = skip_space(&c, skip_value(&c, i)) + 1; /* past the ',' */
        }
    }
    return sbx_json_minify(text + i, skip_value(&c, i) - i);
}

/* ---- printing ------------------------------------------------------------------------------- */

bool sbx_json_format_double(double d, char *buf)
{
    if (!isfinite(d))
        return false;
    if (d == 0) {
        strcpy(buf, signbit(d) ? "-0.0" : "0");
        return true;
    }
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        snprintf(buf, SBX_JSON_DOUBLE_BUF, "%.0f", d);
        return true;
    }
    /* The fewest significant digits that read back as @d: 17 always do. */
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, SBX_JSON_DOUBLE_BUF, "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    return true;
}

typedef struct {
    char *p;
    size_t len;
    size_t cap;
    bool failed;
} Buf;

static void put(Buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;

        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void put_str(Buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* @s as a JSON string: `"` and `\` escaped, control characters too, the rest as it is. */
static void put_quoted(Buf *b, const char *s)
{
    const char *run = s;

    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];

        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        put(b, run, (size_t)(s - run));
        run = s + 1;
        switch (ch) {
        case '"':
            put_str(b, "\\\"");
            break;
        case '\\':
            put_str(b, "\\\\");
            break;
        case '\n':
            put_str(b, "\\n");
            break;
        case '\r':
            put_str(b, "\\r");
            break;
        case '\t':
            put_str(b, "\\t");
            break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            put_str(b, esc);
        }
    }
    put(b, run, (size_t)(s - run));
    put(b, "\"", 1);
}

static void put_number(Buf *b, const cJSON *item)
{
    char text[SBX_JSON_DOUBLE_BUF];

    if (item->valuestring)
        put_str(b, item->valuestring);
    else if (sbx_json_format_double(item->valuedouble, text))
        put_str(b, text);
    else
        b->failed = true; /* JSON has no infinity or NaN */
}

static void put_value(Buf *b, const cJSON *item, int depth)
{
    const cJSON *c;
    bool object = cJSON_IsObject(item);

    switch (item->type & 0xff) {
    case cJSON_False:
        return put_str(b, "false");
    case cJSON_True:
        return put_str(b, "true");
    case cJSON_NULL:
        return put_str(b, "null");
    case cJSON_Number:
        return put_number(b, item);
    case cJSON_String:
        return put_quoted(b, item->valuestring ? item->valuestring : "");
    case cJSON_Raw:
        if (!item->valuestring)
            b->failed = true;
        return put_str(b, item->valuestring ? item->valuestring : "");
    case cJSON_Array:
    case cJSON_Object:
        break;
    default:
        b->failed = true;
        return;
    }
    /* @depth counts arrays and objects, as the parser's nesting limit does: [[1]] is 2. */
    if (depth > SBX_JSON_PRINT_DEPTH_MAX) {
        b->failed = true;
        return;
    }
    put(b, object ? "{" : "[", 1);
    for (c = item->child; c && !b->failed; c = c->next) {
        if (c != item->child)
            put(b, ",", 1);
        if (object) {
            put_quoted(b, c->string ? c->string : "");
            put(b, ":", 1);
        }
        put_value(b, c, depth + 1);
    }
    put(b, object ? "}" : "]", 1);
}

char *sbx_json_print(const cJSON *item)
{
    Buf b = {0};

    if (!item)
        return NULL;
    put_value(&b, item, 1);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
