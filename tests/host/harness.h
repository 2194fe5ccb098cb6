/*
 * Test harness for the session: a fake guest thread on one end of a socketpair, the session on
 * the other, the GLib main loop in the test's thread, optional real tools for tool calls.
 */
#pragma once

#include <glib.h>

#include "fake-guest.h"
#include "session.h"
#include "tools.h"

typedef struct {
    SbxSession *session;
    FakeGuest *guest;
    SbxTools *tools;      /* optional: tool calls go to these providers */
    GCancellable *cancel; /* for tool calls */
    int done_count;
    const SbxRunResult *result; /* from the last on_done (owned by the session) */
    int broken_count;
    char *broken_reason;
    GString *streamed[SBX_STREAM__COUNT];
    gboolean answer_nothing; /* leave tool calls unanswered */
    GPtrArray *held_calls;   /* call ids left unanswered (GUINT_TO_POINTER) */
} Harness;

/** Make a harness; @tools (taken) may be NULL. */
Harness *harness_new(SbxTools *tools);

/**
 * Start @script as the guest and run @req (NULL: a default JavaScript request with the
 * harness's tools). Asserts that the run started.
 */
void harness_start(Harness *h, FakeGuestScript script, gpointer data, const SbxRunRequest *req);

/** Like harness_start() with a real peer already connected on @fd (taken): no fake guest. */
void harness_start_fd(Harness *h, int fd, const SbxRunRequest *req);

/** harness_start_fd() that reports a failure to start instead of asserting. */
gboolean harness_try_start_fd(Harness *h, int fd, const SbxRunRequest *req, GError **error);

/** Run the main loop until @h->done_count reaches @n (asserts within @timeout_ms). */
void harness_wait_done(Harness *h, int n, guint timeout_ms);

/** Run the main loop until on_broken was called (asserts within @timeout_ms). */
void harness_wait_broken(Harness *h, guint timeout_ms);

/** Run the main loop for @ms milliseconds. */
void harness_spin(guint ms);

/**
 * Cancel tool calls, wait until every provider process is reaped, close the session, join the
 * guest (asserting it recorded no failure unless @allow_guest_failure), free everything.
 */
void harness_free(Harness *h, gboolean allow_guest_failure);

/** Write a catalog of the fake tool (tests/host/fake-tool.py) into @dir and load its tools. */
SbxTools *harness_fake_tools(const char *dir, guint timeout_ms, const char *extra_args);

/** The error message of the last result ("" if none). */
const char *harness_error(const Harness *h);
