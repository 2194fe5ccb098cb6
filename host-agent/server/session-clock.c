/*
 * A session's idle timeout and maximum lifetime (session-clock.h).
 */
#include "server/session-clock.h"

#include "server/sessions.h"

static gint64 now_ms(void)
{
    return g_get_real_time() / 1000;
}

static void expire(SbxSessionClock *c, const char *why)
{
    sbx_session_clock_stop(c);
    c->expired(c->data, why);
}

static gboolean idle_over(gpointer data)
{
    SbxSessionClock *c = data;
    g_autofree char *why = g_strdup_printf("idle for %u s (its idle timeout)", c->idle_timeout_s);

    c->idle_timer = 0;
    expire(c, why);
    return G_SOURCE_REMOVE;
}

static gboolean life_over(gpointer data)
{
    SbxSessionClock *c = data;
    g_autofree char *why =
        g_strdup_printf("open for %u s (its maximum lifetime)", c->max_lifetime_s);

    c->life_timer = 0;
    expire(c, why);
    return G_SOURCE_REMOVE;
}

void sbx_session_clock_start(SbxSessionClock *c, guint idle_timeout_s, guint max_lifetime_s,
                             SbxSessionClockExpired expired, gpointer data)
{
    c->idle_timeout_s = idle_timeout_s != 0 ? idle_timeout_s : SBX_SERVER_SESSION_IDLE_DEFAULT_S;
    c->max_lifetime_s =
        max_lifetime_s != 0 ? max_lifetime_s : SBX_SERVER_SESSION_LIFETIME_DEFAULT_S;
    c->created_ms = c->last_active_ms = now_ms();
    c->expired = expired;
    c->data = data;
    c->idle_timer = 0;
    c->life_timer = g_timeout_add_seconds(c->max_lifetime_s, life_over, c);
}

void sbx_session_clock_used(SbxSessionClock *c, gboolean idle)
{
    c->last_active_ms = now_ms();
    g_clear_handle_id(&c->idle_timer, g_source_remove);
    if (idle) {
        c->idle_timer = g_timeout_add_seconds(c->idle_timeout_s, idle_over, c);
    }
}

void sbx_session_clock_busy(SbxSessionClock *c)
{
    g_clear_handle_id(&c->idle_timer, g_source_remove);
}

void sbx_session_clock_stop(SbxSessionClock *c)
{
    g_clear_handle_id(&c->idle_timer, g_source_remove);
    g_clear_handle_id(&c->life_timer, g_source_remove);
}

gint64 sbx_session_clock_expires_ms(const SbxSessionClock *c, gboolean idle)
{
    gint64 idle_end = c->last_active_ms + (gint64)c->idle_timeout_s * 1000;
    gint64 life_end = c->created_ms + (gint64)c->max_lifetime_s * 1000;

    return idle ? MIN(idle_end, life_end) : life_end;
}
