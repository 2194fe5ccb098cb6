/*
 * A stand-in for qemu-system-x86_64 in the lifecycle tests. It reads the command line the VM
 * layer built (the QMP and console socket fds, the vhost-user path), speaks enough QMP, writes
 * to the "console", and tells the fake bridge when "the guest agent" is up.
 * FAKE_QEMU_MODE:
 *   ok (default)    greeting, capabilities, agent up after FAKE_QEMU_BOOT_MS (default 50)
 *   exit-early      print an error on stderr and exit 1 before anything
 *   no-agent        everything but the agent: the boot times out
 *   qmp-silent      never send the QMP greeting
 *   die-after-boot  agent up, then 300 ms later a SHUTDOWN event (guest-reset) and exit 0
 *   flood-console   write 1 MiB to the console, then as ok
 *   internal-error  after the handshake, a STOP event; query-status says internal-error
 *   stop-flood      after the handshake, 500 STOP events; query-status says running, and the
 *                   console counts the query-status commands received ("query-status N")
 *                   (what QEMU does on a KVM emulation failure: it stops, it does not exit)
 * With a virtio-serial profile (-chardev socket,id=agent,path=P,server=on) it listens on P, and
 * "the agent" is an echo: at boot it opens the port (QMP VSERPORT_CHANGE open=true), echoes what
 * the host sends, and when the host hangs up closes and reopens the port (events false, true).
 * Hostile guests for that path:
 *   serial-bad-events  only malformed or foreign VSERPORT_CHANGE events (wrong id, "open" not
 *                      a boolean, no data, other types), a flood of them; never the real open
 *   serial-flap        the port opened and closed 200 times, left open
 *   serial-no-reopen   after the first host hangs up the port stays closed
 * QMP commands: quit (SHUTDOWN event, reply, exit), query-status, hang (never answered),
 * anything else gets CommandNotFound.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int qmp_fd = -1, con_fd = -1, vhost_fd = -1;
static int serial_listen = -1, serial_client = -1; /* virtio-serial: QEMU's socket, the host */
static int caps_done; /* QMP events only after the capabilities negotiation, as QEMU does */
static const char *mode = "ok";

static void say(int fd, const char *s)
{
    size_t len = strlen(s);

    if (write(fd, s, len) != (ssize_t)len)
        exit(9);
}

/* "-chardev socket,id=X,fd=N,..." / "socket,id=vsock,path=P" */
static void parse_chardev(const char *v)
{
    const char *fd = strstr(v, ",fd=");
    const char *path = strstr(v, ",path=");

    if (strstr(v, "id=qmp,") && fd)
        qmp_fd = atoi(fd + 4);
    else if (strstr(v, "id=con,") && fd)
        con_fd = atoi(fd + 4);
    else if (strstr(v, "id=agent,") && path) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        const char *end = strstr(path + 6, ",server");
        snprintf(a.sun_path, sizeof a.sun_path, "%.*s", (int)(end - path - 6), path + 6);
        serial_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (bind(serial_listen, (struct sockaddr *)&a, sizeof a) < 0 ||
            listen(serial_listen, 1) < 0) {
            fprintf(stderr, "fake-qemu: cannot listen on %s\n", a.sun_path);
            exit(1);
        }
    } else if (strstr(v, "id=vsock,") && path) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path + 6);
        vhost_fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(vhost_fd, (struct sockaddr *)&a, sizeof a) < 0) {
            fprintf(stderr, "fake-qemu: cannot connect to vhost-user socket %s\n", a.sun_path);
            exit(1);
        }
    }
}

static void port_event(const char *data)
{
    char ev[512];

    snprintf(ev, sizeof ev,
             "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": "
             "\"VSERPORT_CHANGE\", \"data\": %s}\r\n",
             data);
    say(qmp_fd, ev);
}

static void port_open(int open)
{
    port_event(open ? "{\"id\": \"agent-port\", \"open\": true}"
                    : "{\"id\": \"agent-port\", \"open\": false}");
}

/* "The agent opened its port": what each mode sends instead of the bridge's AGENT-UP. */
static void serial_boot(void)
{
    if (!strcmp(mode, "serial-bad-events")) {
        for (int i = 0; i < 200; i++)
            port_event("{\"id\": \"other-port\", \"open\": true}");
        port_event("{\"id\": \"agent-port\", \"open\": \"true\"}");
        port_event("{\"id\": \"agent-port\", \"open\": 1}");
        port_event("{\"id\": \"agent-port\"}");
        port_event("{\"open\": true}");
        port_event("[\"agent-port\", true]");
        port_event("null");
        return;
    }
    if (!strcmp(mode, "serial-flap"))
        for (int i = 0; i < 200; i++) {
            port_open(1);
            port_open(0);
        }
    port_open(1);
}

/* The host's side of the port: accept one host, echo it; at its hang-up, reopen the port. */
static void serial_poll(void)
{
    char buf[4096];
    ssize_t n;

    if (serial_client < 0) {
        serial_client = accept4(serial_listen, NULL, NULL, SOCK_NONBLOCK);
        return;
    }
    n = read(serial_client, buf, sizeof buf);
    if (n > 0) {
        if (write(serial_client, buf, (size_t)n) != n)
            exit(9);
        return;
    }
    if (n == 0) {
        close(serial_client);
        serial_client = -1;
        port_open(0);
        if (strcmp(mode, "serial-no-reopen") != 0)
            port_open(1);
    }
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Answer one QMP line; returns 1 to exit. */
static int answer(const char *line)
{
    const char *idp = strstr(line, "\"id\":");
    char reply[256];
    int id = idp ? atoi(idp + 5) : 0;

    if (strstr(line, "\"hang\""))
        return 0;
    if (strstr(line, "\"qmp_capabilities\""))
        caps_done = 1;
    if (strstr(line, "\"quit\"")) {
        say(qmp_fd,
            "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": "
            "\"SHUTDOWN\", \"data\": {\"guest\": false, \"reason\": \"host-qmp-quit\"}}\r\n");
        snprintf(reply, sizeof reply, "{\"return\": {}, \"id\": %d}\r\n", id);
        say(qmp_fd, reply);
        return 1;
    }
    if (strstr(line, "\"query-status\"") && !strcmp(mode, "internal-error"))
        snprintf(reply, sizeof reply,
                 "{\"return\": {\"status\": \"internal-error\", "
                 "\"running\": false}, \"id\": %d}\r\n",
                 id);
    else if (strstr(line, "\"qmp_capabilities\"") || strstr(line, "\"query-status\""))
        snprintf(reply, sizeof reply, "{\"return\": %s, \"id\": %d}\r\n",
                 strstr(line, "query-status") ? "{\"status\": \"running\", \"running\": true}"
                                              : "{}",
                 id);
    else
        snprintf(reply, sizeof reply,
                 "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": "
                 "\"no such command\"}, \"id\": %d}\r\n",
                 id);
    say(qmp_fd, reply);
    if (strstr(line, "\"qmp_capabilities\"") &&
        (!strcmp(mode, "internal-error") || !strcmp(mode, "stop-flood")))
        for (int i = 0; i < (strcmp(mode, "stop-flood") ? 1 : 500); i++)
            say(qmp_fd, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": "
                        "\"STOP\"}\r\n");
    if (strstr(line, "\"query-status\"") && !strcmp(mode, "stop-flood")) {
        static int queries;
        char count[64];

        snprintf(count, sizeof count, "fake-qemu: query-status %d\n", ++queries);
        say(con_fd, count);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *boot = getenv("FAKE_QEMU_BOOT_MS");
    long long agent_at, die_at = -1;
    char buf[4096];
    size_t got = 0;

    if (getenv("FAKE_QEMU_MODE"))
        mode = getenv("FAKE_QEMU_MODE");
    if (!strcmp(mode, "exit-early")) {
        fprintf(stderr, "fake-qemu: -machine: unsupported machine type\n");
        return 1;
    }
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-chardev"))
            parse_chardev(argv[++i]);
    if (qmp_fd < 0 || con_fd < 0 || (vhost_fd < 0 && serial_listen < 0)) {
        fprintf(stderr, "fake-qemu: missing -chardev for qmp, con or vsock\n");
        return 1;
    }
    if (!strcmp(mode, "flood-console"))
        for (int i = 0; i < 256; i++)
            say(con_fd, "flood flood flood flood flood flood flood flood flood flood flood.\n"
                        "0123456789012345678901234567890123456789012345678901234567890\n");
    say(con_fd, "fake-qemu: booting\n");
    if (strcmp(mode, "qmp-silent") != 0)
        say(qmp_fd, "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": "
                    "7}, \"package\": \"fake\"}, \"capabilities\": [\"oob\"]}}\r\n");
    agent_at = strcmp(mode, "no-agent") && strcmp(mode, "internal-error")
                   ? now_ms() + (boot ? atoi(boot) : 50)
                   : -1;
    for (;;) {
        struct pollfd p = {qmp_fd, POLLIN, 0};
        char *nl;
        ssize_t n;
        if (poll(&p, 1, 10) > 0) {
            n = read(qmp_fd, buf + got, sizeof buf - 1 - got);
            if (n <= 0)
                return 0;
            got += (size_t)n;
            buf[got] = '\0';
            while ((nl = strchr(buf, '\n'))) {
                *nl = '\0';
                if (answer(buf))
                    return 0;
                memmove(buf, nl + 1, got - (size_t)(nl + 1 - buf) + 1);
                got -= (size_t)(nl + 1 - buf);
            }
        }
        if (serial_listen >= 0)
            serial_poll();
        if (agent_at >= 0 && now_ms() >= agent_at && (serial_listen < 0 || caps_done)) {
            if (serial_listen >= 0)
                serial_boot();
            else
                say(vhost_fd, "AGENT-UP\n");
            say(con_fd, "fake-qemu: agent up\n");
            agent_at = -1;
            if (!strcmp(mode, "die-after-boot"))
                die_at = now_ms() + 300;
        }
        if (die_at >= 0 && now_ms() >= die_at) {
            say(con_fd, "Kernel panic - not syncing: fake\n");
            say(qmp_fd,
                "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": "
                "\"SHUTDOWN\", \"data\": {\"guest\": true, \"reason\": \"guest-reset\"}}\r\n");
            return 0;
        }
    }
}
