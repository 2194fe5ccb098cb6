/*
 * A session's clock (docs/sessions.md, "Its end"): its idle timeout and its maximum lifetime,
 * the two timers that end a session nobody uses. The server's sessions (sessions.c) and the
 * sessions `sandbox mcp` holds itself (cli/mcp-local.c) keep one each, so that both end alike:
 * the same defaults, the same clock, the same reasons. Runs on the GLib main loop.
 */
#pragma once

#include <glib.h>

/* One of the session's timers ran out: @why says which ("idle for 600 s (its idle timeout)"). */
typedef void (*SbxSessionClockExpired)(gpointer data, const char *why);

/* Embedded in its session; every field but the timers may be read. */
typedef struct {
    guint idle_timeout_s;
    guint max_lifetime_s;
    gint64 created_ms;     /* unix ms */
    gint64 last_active_ms; /* unix ms: the end of its last use */
    guint idle_timer;
    guint life_timer;
    SbxSessionClockExpired expired;
    gpointer data;
} SbxSessionClock;

/**
 * Start @clock now: @idle_timeout_s and @max_lifetime_s (0: the server's defaults,
 * SBX_SERVER_SESSION_IDLE_DEFAULT_S and _LIFETIME_DEFAULT_S); the lifetime runs from now, the
 * idle timeout once the session is idle (sbx_session_clock_used()). @expired runs at most once,
 * from the loop, when either runs out (the clock is stopped first).
 */
void sbx_session_clock_start(SbxSessionClock *clock, guint idle_timeout_s, guint max_lifetime_s,
                             SbxSessionClockExpired expired, gpointer data);

/** The session was used until now; @idle: it is idle from now (its idle timeout runs again). */
void sbx_session_clock_used(SbxSessionClock *clock, gboolean idle);

/** The session works (an execution, a file operation): no idle time counts meanwhile. */
void sbx_session_clock_busy(SbxSessionClock *clock);

/** Stop both timers (the session ended, or is freed). */
void sbx_session_clock_stop(SbxSessionClock *clock);

/** When the session ends unless used (unix ms): @idle, the sooner of the two, else its lifetime. */
gint64 sbx_session_clock_expires_ms(const SbxSessionClock *clock, gboolean idle);
