/*
 * Fakes the execution core's tests share (exec-fakes.c): a VM source whose guest agent is a
 * fake guest thread (fake-guest.h), an execution with a sink that records what it hears, and
 * a temporary store for records.
 */
#pragma once

#include "exec/exec.h"
#include "harness.h"
#include "store/records.h"

typedef struct {
    SbxExecSource base;
    FakeGuest *guest; /* plays the guest agent on the VM's channel */
    int fd;           /* the host end, until the session takes it */
    guint delay_ms;   /* the acquire takes this long */
    gboolean fail;    /* the acquire fails */
    guint timer;
    gboolean acquiring;
    int cancels;
    int releases;
    gboolean begun;
    SbxExecAcquiredFunc done;
    gpointer data;
    SbxExecVmExitFunc exit_func;
    gpointer exit_data;
    gboolean *freed; /* set when the core frees the source */
} FakeSource;

typedef struct {
    FakeSource src; /* the test owns its memory; the core calls free on it */
    gboolean src_freed;
    SbxExec *exec;
    GString *out[SBX_STREAM__COUNT];
    int done;
    int warnings;
    gint64 tools_in_flight_at_done;
} Run;

/* The fake source's operations (its acquire succeeds after delay_ms, or fails). */
extern const SbxExecSourceOps fake_ops;

/* The sink that records into a Run. */
extern const SbxExecSink run_sink;

/* Output sinks: the streamed one, or (set use_live_sink) collected output shown live. */
extern gboolean use_live_sink;

/**
 * An execution on the fake source with @script as its guest (NULL: none, the acquire never gets
 * that far), with @tools (NULL: an empty catalog) and @req (NULL: JavaScript "1").
 */
Run *run_new(FakeGuestScript script, SbxTools *tools, const SbxExecRequest *req);

/** After the done, the VM is released once the loop is idle, within 5 s (fails otherwise). */
void wait_released(Run *run);

/** Run the loop until the sink's done (fails the test after @timeout_ms). */
void run_wait_done(Run *run, guint timeout_ms);

/** The report with an extra member. */
char *report(Run *run);

void run_free(Run *run);

/* A temporary store for one test. */
typedef struct {
    char *dir;
    SbxStore *store;
} TmpStore;

TmpStore *tmp_store_new(void);
void tmp_store_free(TmpStore *t);

/* The record info of the tests' executions. */
extern const SbxExecRecordInfo record_info;

/** The record of @run (read back from @t), with its tool calls and approvals (either NULL). */
SbxRecord *record_of(TmpStore *t, Run *run, GPtrArray **ret_calls, GPtrArray **ret_appr);
