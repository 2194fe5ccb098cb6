/*
 * The host's TSC frequency, for the guest's `tsc_early_khz=` boot parameter.
 *
 * Why: under TCG the guest's RDTSC reads the host's TSC, so it ticks at the host's rate. Without
 * the parameter the guest calibrates it against the emulated PIT, which under TCG sometimes
 * fails; the TSC is then marked unstable and the boot hangs (shared/FINDINGS.md).
 * Mirrors guest-image/host-tsc-khz.
 */
#pragma once

#include <glib.h>

/* Plausible TSC range, 100 MHz .. 10 GHz: anything else is a parse error, not a machine. */
#define SBX_TSC_KHZ_MIN 100000u
#define SBX_TSC_KHZ_MAX 10000000u

/**
 * The host TSC frequency in kHz, from the first source that tells (computed once per process):
 *   1. $SANDBOX_TSC_KHZ (an explicit override, range-checked; a bad value is an error);
 *   2. the kernel log (/dev/kmsg): "tsc: Refined TSC clocksource calibration: N MHz", else
 *      "tsc: Detected N MHz TSC", else "tsc: Detected N MHz processor";
 *   3. /sys/devices/system/cpu/cpu0/tsc_freq_khz (some patched kernels);
 *   4. a measurement: RDTSC against CLOCK_MONOTONIC_RAW over 50 ms, if the CPU says its TSC is
 *      constant (the kernel log is a ring and loses boot messages on long-running hosts).
 * @ret_source (may be NULL) gets a static string naming the source.
 */
gboolean sbx_tsc_host_khz(guint *ret_khz, const char **ret_source, GError **error);

/**
 * Find the best "tsc:" line in kernel log text (lines separated by '\n'; the last match of the
 * best kind wins). Returns 0 and sets *@ret_khz, or -ENOENT.
 */
int sbx_tsc_from_log(const char *log, guint *ret_khz);

/** Parse "2599.998" (MHz, as the kernel prints it) into kHz exactly. -EINVAL if not plausible. */
int sbx_tsc_parse_mhz(const char *text, guint *ret_khz);

/** Measure the TSC against CLOCK_MONOTONIC_RAW for @ms milliseconds. -EOPNOTSUPP if unusable. */
int sbx_tsc_measure_khz(guint ms, guint *ret_khz);
