/*
 * Guest RAM files for snapshots: anonymous files in /dev/shm (O_TMPFILE: they have no name, so
 * nothing is left behind whatever happens to this process) and sparse copies between them and
 * a snapshot's `ram` file. Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>

/* Where the RAM of running snapshot VMs lives: tmpfs, so QEMU and the bridge share pages. */
#define SBX_RAMFILE_DIR "/dev/shm"

/** A new nameless file of @size bytes (a hole) in SBX_RAMFILE_DIR; fd or -1 with @error. */
int sbx_ramfile_new(guint64 size, GError **error);

/**
 * Copy the data of the file at @src into @fd at the same offsets (holes are skipped; @fd is
 * expected to be a hole there). Blocking; safe to call from a worker thread.
 */
gboolean sbx_ramfile_fill(int fd, const char *src, GError **error);

/**
 * Copy @fd to a new file @dst (created 0600, must not exist), leaving out holes and pages of
 * zeros. FALSE with @error; then @dst is removed.
 */
gboolean sbx_ramfile_save(int fd, const char *dst, GError **error);
