/*
 * Fuzz target: bytes from an MCP server through the framer (stdio lines or an SSE stream) in
 * fragments of 1..143 bytes, parsing every message it yields as JSON-RPC.
 *
 * Input: byte 0 picks the framing (bit 0), a small or the real message limit (bit 1) and seeds
 * the fragment sizes; the rest is the stream. Nothing may crash, leak or exceed the limit. An
 * SSE stream's last event id (sent back as a header when a stream is resumed) stays within
 * SBX_MCP_EVENT_ID_MAX without control characters; its retry is -1 or 0..G_MAXINT32.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp-wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A small limit as well as the real one, so that the too-long paths are reached quickly. */
#define SMALL_MESSAGE_MAX 256

typedef struct {
    gsize max;
} Limits;

static void on_message(const char *text, gsize len, gpointer user_data)
{
    const Limits *lim = user_data;
    SbxMcpMessage *m;
    GError *error = NULL;

    if (len > lim->max)
        abort(); /* the framer let a message past its limit */
    m = sbx_mcp_message_parse(text, len, &error);
    if ((m == NULL) == (error == NULL))
        abort(); /* exactly one of a message and an error */
    if (m != NULL && (m->kind == SBX_MCP_MSG_REQUEST || m->kind == SBX_MCP_MSG_NOTIFICATION) &&
        m->method == NULL)
        abort();
    sbx_mcp_message_free(m);
    g_clear_error(&error);
}

static void check_resume_state(const SbxMcpFramer *f)
{
    const char *id = sbx_mcp_framer_last_event_id(f);
    gint64 retry = sbx_mcp_framer_retry_ms(f);

    if (id != NULL) {
        size_t len = strlen(id);
        if (len == 0 || len > SBX_MCP_EVENT_ID_MAX)
            abort();
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
                abort();
    }
    if (retry < -1 || retry > G_MAXINT32)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Limits lim;
    SbxMcpFramer *f;
    uint32_t seed;
    size_t pos = 1;

    if (size < 1)
        return 0;
    seed = data[0];
    lim.max = (data[0] & 2) ? SBX_MCP_MESSAGE_MAX : SMALL_MESSAGE_MAX;
    f = sbx_mcp_framer_new((data[0] & 1) ? SBX_MCP_FRAMING_SSE : SBX_MCP_FRAMING_LINES, lim.max);
    while (pos < size) {
        size_t n;
        seed = seed * 1103515245u + 12345u;
        n = 1 + (seed >> 16) % 143;
        if (n > size - pos)
            n = size - pos;
        if (!sbx_mcp_framer_feed(f, data + pos, n, on_message, &lim, NULL))
            break; /* a stream past its limit is dropped by the transports */
        pos += n;
    }
    check_resume_state(f);
    sbx_mcp_framer_finish(f, on_message, &lim);
    sbx_mcp_framer_free(f);
    return 0;
}
