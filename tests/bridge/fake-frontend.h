/*
 * The QEMU side of vhost-user, for tests and the fuzz target: sends messages (with fds as
 * SCM_RIGHTS) to the bridge's control plane.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Send @len bytes with @nfds (<= VU_MAX_FDS) fds attached; sendmsg's result. */
ssize_t fake_frontend_send_raw(int sock, const void *buf, size_t len, const int *fds, unsigned nfds,
                               int flags);

/** Send a vhost-user message: header (@req, version | @flags, @size) + @payload (<= 512). */
ssize_t fake_frontend_send(int sock, uint32_t req, uint32_t flags, const void *payload,
                           uint32_t size, const int *fds, unsigned nfds);
