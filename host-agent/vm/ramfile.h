/*
 * Guest RAM files for snapshots: memfds (shmem, so QEMU and the bridge share pages; nameless,
 * so nothing is left behind whatever happens to this process; sealable) and sparse copies
 * between them and a snapshot's `ram` file. Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>

/** A new memfd of @size bytes (a hole), sealable; fd or -1 with @error. */
int sbx_ramfile_new(guint64 size, GError **error);

/** Seal @fd (from sbx_ramfile_new) against writes, resizing and further seals. */
gboolean sbx_ramfile_seal(int fd, GError **error);

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
