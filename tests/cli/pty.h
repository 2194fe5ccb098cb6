/* A pseudo-terminal for the CLI's tests: the terminal side (what the code under test writes to)
 * in raw mode, so bytes pass without the line discipline's changes, and the other side to read. */
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <glib.h>

/* Open a pty of @cols x @rows: *@ret_term (the terminal, blocking) and *@ret_master (non-blocking).
 */
static inline void test_pty_open(guint cols, guint rows, int *ret_term, int *ret_master)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    g_assert_true(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
    int term = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    g_assert_true(term >= 0);
    struct termios t;
    g_assert_true(tcgetattr(term, &t) == 0);
    cfmakeraw(&t);
    g_assert_true(tcsetattr(term, TCSANOW, &t) == 0);
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    g_assert_true(ioctl(master, TIOCSWINSZ, &ws) == 0);
    g_assert_true(fcntl(master, F_SETFL, O_NONBLOCK) == 0);
    *ret_term = term;
    *ret_master = master;
}

/* Append what the master side can read now to @into. */
static inline void test_pty_drain(int master, GString *into)
{
    char buf[65536];
    ssize_t n;

    while ((n = read(master, buf, sizeof(buf))) > 0) {
        g_string_append_len(into, buf, n);
    }
}
