/*
 * A scripted fake QMP server for unit tests (after libvirt's tests/qemumonitortestutils.c),
 * running on the test's main loop at the other end of a socketpair.
 *
 * It sends a greeting (or a given raw text), then answers each command it receives with the
 * next step of the script: the step names the expected command and the raw reply text, in
 * which "%ID%" is replaced by the command's id. A reply may hold several lines (an event
 * before the reply), or nothing (the server stays silent). Mismatches are recorded.
 */
#pragma once

#include <glib.h>

typedef struct {
    const char *expect; /* the command expected ("query-status"), NULL = any */
    const char *reply;  /* raw text to send, "%ID%" replaced; NULL = never answer */
} FakeQmpStep;

typedef struct FakeQmp FakeQmp;

/* The standard greeting of QEMU 7.2 (one line, with \r\n). */
extern const char fake_qmp_greeting[];

/** Serve on @fd (taken). @greeting NULL = none; @steps is not copied (keep it static). */
FakeQmp *fake_qmp_new(int fd, const char *greeting, const FakeQmpStep *steps, gsize n_steps);

/** Send raw bytes now. */
void fake_qmp_send(FakeQmp *f, const char *data, gsize len);

/** Close the server's end (EOF for the client). */
void fake_qmp_close(FakeQmp *f);

/** The last command line received (NULL before any). */
const char *fake_qmp_last_line(FakeQmp *f);

/** Steps used so far; the first mismatch (or NULL). */
gsize fake_qmp_steps_done(FakeQmp *f);
const char *fake_qmp_error(FakeQmp *f);

void fake_qmp_free(FakeQmp *f);
