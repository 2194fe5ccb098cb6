/* The host TSC frequency (see tsc.h). */
#include "tsc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "vm-error.h"

/*
 * Kernel log records are at most ~1 KiB of text plus metadata; /dev/kmsg fails a read() with
 * EINVAL when the buffer is smaller than the record, so take plenty.
 */
#define KMSG_RECORD_MAX (16 * 1024)

/*
 * Only "tsc:" lines are kept while scanning the kernel log; a boot prints a handful. 64 KiB
 * bounds memory even if something floods the log with lines that match.
 */
#define TSC_LINES_MAX (64 * 1024)

/* The kernel's ring holds at most a few hundred thousand records; stop a runaway loop. */
#define KMSG_RECORDS_MAX 1000000

int sbx_tsc_parse_mhz(const char *text, guint *ret_khz)
{
    guint64 mhz = 0, frac = 0;
    guint digits = 0, n = 0;
    const char *p = text;

    for (; g_ascii_isdigit(*p) && n < 6; p++, n++)
        mhz = mhz * 10 + (guint64)(*p - '0');
    if (n == 0 || g_ascii_isdigit(*p))
        return -EINVAL;
    if (*p == '.') {
        /* The kernel prints kHz as "%lu.%03lu MHz": the first three decimals are exact. */
        for (p++; g_ascii_isdigit(*p); p++, digits++)
            if (digits < 3)
                frac = frac * 10 + (guint64)(*p - '0');
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (mhz * 1000 + frac < SBX_TSC_KHZ_MIN || mhz * 1000 + frac > SBX_TSC_KHZ_MAX)
        return -EINVAL;
    *ret_khz = (guint)(mhz * 1000 + frac);
    return 0;
}

/* The kHz in the last line of @log containing @marker followed by "<MHz> MHz" + @suffix. */
static int last_match(const char *log, const char *marker, const char *suffix, guint *ret_khz)
{
    const char *p = log;
    int found = -ENOENT;

    while ((p = strstr(p, marker))) {
        const char *num = p + strlen(marker);
        const char *eol = strchrnul(num, '\n');
        const char *unit = strstr(num, " MHz");
        guint khz;

        p = num;
        if (!unit || unit > eol || strncmp(unit + 4, suffix, strlen(suffix)) != 0)
            continue;
        if (sbx_tsc_parse_mhz(num, &khz) == 0) {
            *ret_khz = khz;
            found = 0;
        }
    }
    return found;
}

int sbx_tsc_from_log(const char *log, guint *ret_khz)
{
    /* Best first: the refined value is measured against a reference clock over ~1 s. */
    if (last_match(log, "Refined TSC clocksource calibration: ", "", ret_khz) == 0)
        return 0;
    if (last_match(log, "tsc: Detected ", " TSC", ret_khz) == 0)
        return 0;
    return last_match(log, "tsc: Detected ", " processor", ret_khz);
}

/* Append the message of one /dev/kmsg record ("prio,seq,ts,flags;text\n...") if it is a tsc one. */
static void keep_tsc_line(GString *lines, const char *rec, gsize len)
{
    const char *text = memchr(rec, ';', len);
    const char *end;

    if (!text)
        return;
    text++;
    end = memchr(text, '\n', len - (gsize)(text - rec));
    if (!end)
        end = rec + len;
    if (!g_strstr_len(text, end - text, "tsc: "))
        return;
    if (lines->len + (gsize)(end - text) + 1 > TSC_LINES_MAX)
        return;
    g_string_append_len(lines, text, end - text);
    g_string_append_c(lines, '\n');
}

/* The kernel's "tsc:" lines of this boot, from /dev/kmsg (what dmesg reads). */
static int read_kmsg_tsc_lines(GString *lines)
{
    g_autofree char *rec = g_malloc(KMSG_RECORD_MAX);
    int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    for (guint i = 0; i < KMSG_RECORDS_MAX; i++) {
        ssize_t n = read(fd, rec, KMSG_RECORD_MAX);
        if (n < 0 && (errno == EINTR || errno == EPIPE))
            continue; /* EPIPE: the record was overwritten while we read; go on */
        if (n <= 0)
            break; /* EAGAIN: the end of the log */
        keep_tsc_line(lines, rec, (gsize)n);
    }
    close(fd);
    return 0;
}

static int from_kmsg(guint *ret_khz)
{
    g_autoptr(GString) lines = g_string_new(NULL);
    int r = read_kmsg_tsc_lines(lines);

    return r < 0 ? r : sbx_tsc_from_log(lines->str, ret_khz);
}

static int from_sysfs(guint *ret_khz)
{
    g_autofree char *text = NULL;
    guint64 v;

    if (!g_file_get_contents("/sys/devices/system/cpu/cpu0/tsc_freq_khz", &text, NULL, NULL))
        return -ENOENT;
    g_strchomp(text);
    if (!g_ascii_string_to_unsigned(text, 10, SBX_TSC_KHZ_MIN, SBX_TSC_KHZ_MAX, &v, NULL))
        return -EINVAL;
    *ret_khz = (guint)v;
    return 0;
}

/* True if /proc/cpuinfo lists the constant_tsc flag (the TSC rate does not follow the clock). */
static gboolean constant_tsc(void)
{
    g_autofree char *text = NULL;

    if (!g_file_get_contents("/proc/cpuinfo", &text, NULL, NULL))
        return FALSE;
    return strstr(text, " constant_tsc") != NULL;
}

#if defined(__x86_64__) || defined(__i386__)
/* A (tsc, ns) pair read close together: retried while a preemption separates the two reads. */
static void sample(guint64 *ret_tsc, guint64 *ret_ns)
{
    guint64 best = G_MAXUINT64;

    for (int i = 0; i < 16; i++) {
        struct timespec ts;
        guint64 a = __rdtsc();
        clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
        guint64 b = __rdtsc();
        if (b - a < best) {
            best = b - a;
            *ret_tsc = a + (b - a) / 2;
            *ret_ns = (guint64)ts.tv_sec * 1000000000u + (guint64)ts.tv_nsec;
        }
    }
}

int sbx_tsc_measure_khz(guint ms, guint *ret_khz)
{
    guint64 t0, n0, t1, n1, khz;

    if (!constant_tsc() || ms == 0)
        return -EOPNOTSUPP;
    sample(&t0, &n0);
    g_usleep((gulong)ms * 1000);
    sample(&t1, &n1);
    if (n1 <= n0 || t1 <= t0)
        return -EOPNOTSUPP;
    khz = ((t1 - t0) * 1000000u + (n1 - n0) / 2) / (n1 - n0);
    if (khz < SBX_TSC_KHZ_MIN || khz > SBX_TSC_KHZ_MAX)
        return -EOPNOTSUPP;
    *ret_khz = (guint)khz;
    return 0;
}
#else
int sbx_tsc_measure_khz(guint ms, guint *ret_khz)
{
    (void)ms;
    (void)ret_khz;
    return -EOPNOTSUPP;
}
#endif

static gboolean from_env(const char *v, guint *ret_khz, GError **error)
{
    guint64 khz;

    if (!g_ascii_string_to_unsigned(v, 10, SBX_TSC_KHZ_MIN, SBX_TSC_KHZ_MAX, &khz, NULL)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "SANDBOX_TSC_KHZ='%s' is not a kHz value between %u and %u", v, SBX_TSC_KHZ_MIN,
                    SBX_TSC_KHZ_MAX);
        return FALSE;
    }
    *ret_khz = (guint)khz;
    return TRUE;
}

/* The sources in order (the environment is handled by the caller: it is not cached). */
static const char *detect(guint *ret_khz)
{
    /* 50 ms: RDTSC/clock jitter of ~1 us is then 20 ppm, far finer than the kernel needs. */
    if (from_kmsg(ret_khz) == 0)
        return "kernel log";
    if (from_sysfs(ret_khz) == 0)
        return "sysfs tsc_freq_khz";
    if (sbx_tsc_measure_khz(50, ret_khz) == 0)
        return "measured";
    return NULL;
}

gboolean sbx_tsc_host_khz(guint *ret_khz, const char **ret_source, GError **error)
{
    static gsize once;
    static guint cached_khz;
    static const char *cached_source;
    const char *env = g_getenv("SANDBOX_TSC_KHZ");

    if (env && *env) {
        if (!from_env(env, ret_khz, error))
            return FALSE;
        if (ret_source)
            *ret_source = "SANDBOX_TSC_KHZ";
        return TRUE;
    }
    if (g_once_init_enter(&once)) {
        cached_source = detect(&cached_khz);
        g_once_init_leave(&once, 1);
    }
    if (!cached_source) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "cannot tell the host TSC frequency: no 'tsc:' line in the kernel log "
                    "(/dev/kmsg), no /sys/devices/system/cpu/cpu0/tsc_freq_khz, and the TSC is "
                    "not constant. Set SANDBOX_TSC_KHZ=<kHz>");
        return FALSE;
    }
    *ret_khz = cached_khz;
    if (ret_source)
        *ret_source = cached_source;
    return TRUE;
}
