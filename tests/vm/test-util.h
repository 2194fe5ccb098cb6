/* Small helpers shared by the VM tests. */
#pragma once

#include <glib.h>

static inline gboolean test_set_flag(gpointer data)
{
    *(gboolean *)data = TRUE;
    return G_SOURCE_REMOVE;
}

/* Iterate the default main context until *@flag is set or @timeout_ms passed. */
static inline gboolean run_until(const gboolean *flag, guint timeout_ms)
{
    gboolean timed_out = FALSE;
    guint id = g_timeout_add(timeout_ms, test_set_flag, &timed_out);

    while (!*flag && !timed_out)
        g_main_context_iteration(NULL, TRUE);
    if (!timed_out)
        g_source_remove(id);
    return *flag;
}

/* Run the loop for @ms milliseconds. */
static inline void run_for(guint ms)
{
    gboolean never = FALSE;

    run_until(&never, ms);
}

/* True if process @pid no longer exists (reaped: /proc/<pid> is gone). */
static inline gboolean pid_gone(GPid pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d", (int)pid);

    return pid <= 0 || !g_file_test(path, G_FILE_TEST_EXISTS);
}

/* True if @dir exists and holds nothing. */
static inline gboolean dir_empty(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);

    return d && g_dir_read_name(d) == NULL;
}
