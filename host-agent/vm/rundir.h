/*
 * A VM's runtime directory (its sockets): made in a parent directory with a lock file beside it,
 * `<dir>.lock`, held (flock) for the VM's life; removed at teardown. A dir whose lock a later
 * agent can take belongs to an agent that died without its teardown (SIGKILL): that agent's
 * first VM removes it (sbx_rundir_sweep). The lock lives outside the dir, which the VM's
 * jailed processes can write to. Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>

typedef struct SbxRundir SbxRundir;

/** A new dir `<parent>/sbx-vm-XXXXXX` (0700) and its held lock; NULL with SBX_VM_ERROR_CONFIG. */
SbxRundir *sbx_rundir_new(const char *parent, GError **error);

/** The directory's path. */
const char *sbx_rundir_path(const SbxRundir *rd);

/** Remove what is in @parent of agents that died: dirs whose lock is free and not new. */
void sbx_rundir_sweep(const char *parent);

/** Remove the dir (its sockets) and the lock file, release the lock. Accepts NULL. */
void sbx_rundir_free(SbxRundir *rd);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxRundir, sbx_rundir_free)
