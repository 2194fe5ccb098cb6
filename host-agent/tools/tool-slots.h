/*
 * The host-wide cap on command tool processes running at once: SANDBOX_TOOL_PROCS slots, shared
 * by every sandbox process of the user on the host (`sandbox run`s, `sandbox serve`). A slot is a
 * lock file, taken with a non-blocking flock() for as long as one tool process runs (spawn to
 * reap). A call that finds no free slot waits in this process's FIFO queue and is retried when
 * one of this process's slots is released and on a short timer (for those of other processes).
 *
 * The lock files live in $XDG_RUNTIME_DIR/sandbox-tool-slots/, or /tmp/sandbox-tool-slots-<uid>/
 * without XDG_RUNTIME_DIR (or if it is not a directory): an owner-only directory (refused
 * otherwise). A slot's file is removed
 * when it is released and the directory with the last one, so nothing is left behind (except
 * after a SIGKILL: the kernel releases the lock, the next holder removes the file).
 *
 * Used from one thread: the main loop's (callbacks run from its thread-default context).
 */
#pragma once

#include <glib.h>

/* The environment variable that sets the cap. */
#define SBX_TOOL_PROCS_ENV "SANDBOX_TOOL_PROCS"

/*
 * Most slots: each is a file tried in turn, up to every retry of the queue's head. A cap of
 * more than 1024 processes at once is no cap on one host.
 */
#define SBX_TOOL_PROCS_MAX 1024

/*
 * The default cap: twice the processors this process may use, from 4 to 64. Tool programs
 * mostly wait (on the network, on a server) but each costs memory (a Python 10 MB, a Node
 * 40 MB): a few per core keeps a 300-call Promise.all from starting hundreds at once.
 */
#define SBX_TOOL_PROCS_DEFAULT_MIN 4
#define SBX_TOOL_PROCS_DEFAULT_MAX 64

/*
 * How often the head of the queue retries while it waits (milliseconds): a slot freed by
 * another process is noticed that late at worst; one freed by this process, at once.
 */
#define SBX_TOOL_SLOT_RETRY_MS 20

typedef struct SbxToolSlot SbxToolSlot;
typedef struct SbxToolSlotWait SbxToolSlotWait;

/* A queued request completes: with @slot (the receiver owns it), or with @error (not owned). */
typedef void (*SbxToolSlotReady)(SbxToolSlot *slot, const GError *error, gpointer data);

/**
 * The cap (SANDBOX_TOOL_PROCS, read once per process), or 0 with an SBX_CATALOG_ERROR if the
 * variable is not an integer from 1 to SBX_TOOL_PROCS_MAX.
 */
guint sbx_tool_slots_cap(GError **error);

/**
 * Take a slot. If one is free and no earlier request of this process waits: TRUE, *@ret_slot
 * set. Else the request is queued: TRUE, *@ret_wait set, and @ready runs later, from the main
 * loop (never from this call), unless the wait is cancelled first. FALSE with an
 * SBX_CATALOG_ERROR if slots cannot be had at all (a bad cap, the directory refused).
 */
gboolean sbx_tool_slot_acquire(SbxToolSlotReady ready, gpointer data, SbxToolSlot **ret_slot,
                               SbxToolSlotWait **ret_wait, GError **error);

/** Leave the queue: @wait's ready callback never runs. */
void sbx_tool_slot_wait_cancel(SbxToolSlotWait *wait);

/** Release @slot (its process was reaped); the queue's head is retried. Accepts NULL. */
void sbx_tool_slot_release(SbxToolSlot *slot);

/** Requests of this process waiting for a slot (for tests). */
guint sbx_tool_slots_waiting(void);
