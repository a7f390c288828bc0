/*
 * rigfdstore: a stand-in for systemd's notify socket and file descriptor store, for the
 * rig's zero-gap restart suite (the busybox guest has no systemd). Built static on the
 * host and baked into the initramfs.
 *
 *   rigfdstore serve SOCKET CTLDIR MAX -- DAEMON [ARG]...
 *       Binds a Unix datagram socket at SOCKET, starts DAEMON with NOTIFY_SOCKET=SOCKET and
 *       FDSTORE=MAX, and acts as its service manager: FDSTORE=1 keeps the passed
 *       descriptors under FDNAME (at most MAX; like systemd, without FDPOLL=0 a descriptor
 *       that polls POLLHUP/POLLERR is dropped), FDSTOREREMOVE=1 closes every descriptor
 *       with that name; READY=1, STOPPING=1, WATCHDOG=1 and STATUS= are counted/kept.
 *       SIGUSR2: restart — SIGTERM to the daemon, wait for its exit, start it again with
 *       the stored descriptors as fds 3.. (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID), as
 *       systemd does. SIGTERM: stop the daemon and exit.
 *       CTLDIR/state is rewritten after every event, one "key value" per line: pid,
 *       stored, ready, stopping, watchdog, restarts, last_exit_ms (monotonic ms of the
 *       last exit), last_exec_ms, status.
 *
 *   rigfdstore probe PORTFILE STOPFILE
 *       Until STOPFILE exists: for each port in PORTFILE (one per line) try to bind a
 *       plain TCP socket (no SO_REUSEADDR) to 0.0.0.0:PORT and close it at once. Prints
 *       "rounds=N free=M" (M = binds that succeeded: moments a mapped port was free).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXFDS 65536

static int fds[MAXFDS];
static char *names[MAXFDS];
static int nfds, maxfds;
static long ready, stopping, watchdog, restarts;
static double last_exit_ms, last_exec_ms;
static char status[512];
static pid_t child;
static volatile sig_atomic_t want_restart, want_stop;
static const char *ctldir;

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void write_state(void)
{
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof(tmp), "%s/state.tmp", ctldir);
	snprintf(path, sizeof(path), "%s/state", ctldir);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "pid %d\nstored %d\nready %ld\nstopping %ld\nwatchdog %ld\nrestarts %ld\n"
		   "last_exit_ms %.1f\nlast_exec_ms %.1f\nstatus %s\n",
		(int)child, nfds, ready, stopping, watchdog, restarts, last_exit_ms,
		last_exec_ms, status);
	fclose(f);
	rename(tmp, path);
}

static int hangs_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
			return 1;
	return 0;
}

static void handle(const char *text, int *got, int ngot)
{
	char name[256] = "stored";
	const char *p = strstr(text, "FDNAME=");
	if (p && (p == text || p[-1] == '\n')) {
		size_t n = strcspn(p + 7, "\n");
		if (n >= sizeof(name))
			n = sizeof(name) - 1;
		memcpy(name, p + 7, n);
		name[n] = 0;
	}
	if (has_line(text, "FDSTORE=1")) {
		int watched = !has_line(text, "FDPOLL=0");
		for (int i = 0; i < ngot; i++) {
			if (nfds >= maxfds || (watched && hangs_up(got[i]))) {
				close(got[i]);
				continue;
			}
			fds[nfds] = got[i];
			names[nfds] = strdup(name);
			nfds++;
		}
		ngot = 0;
	} else if (has_line(text, "FDSTOREREMOVE=1")) {
		int j = 0;
		for (int i = 0; i < nfds; i++) {
			if (strcmp(names[i], name) == 0) {
				close(fds[i]);
				free(names[i]);
			} else {
				fds[j] = fds[i];
				names[j] = names[i];
				j++;
			}
		}
		nfds = j;
	}
	for (int i = 0; i < ngot; i++)
		close(got[i]);
	if (has_line(text, "READY=1"))
		ready++;
	if (has_line(text, "STOPPING=1"))
		stopping++;
	if (has_line(text, "WATCHDOG=1"))
		watchdog++;
	p = strstr(text, "STATUS=");
	if (p && (p == text || p[-1] == '\n')) {
		size_t n = strcspn(p + 7, "\n");
		if (n >= sizeof(status))
			n = sizeof(status) - 1;
		memcpy(status, p + 7, n);
		status[n] = 0;
	}
}

static void receive(int sock)
{
	char buf[4096];
	union {
		char b[CMSG_SPACE(sizeof(int) * 253)];
		struct cmsghdr align;
	} ctl;
	for (;;) {
		struct iovec iov = { buf, sizeof(buf) - 1 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				    .msg_controllen = sizeof(ctl.b) };
		ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0)
			return;
		buf[n] = 0;
		int got[253], ngot = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				for (int i = 0; i < k && ngot < 253; i++)
					memcpy(&got[ngot++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			}
		}
		handle(buf, got, ngot);
		write_state();
	}
}

static void start(char **argv, const char *sock_path)
{
	last_exec_ms = mono_ms();
	child = fork();
	if (child != 0)
		return;
	/* Lay the stored descriptors out at 3..: first above the range, then down. */
	int base = 3 + nfds + 16, *high = malloc(sizeof(int) * (nfds + 1));
	for (int i = 0; i < nfds; i++)
		high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, base);
	for (int i = 0; i < nfds; i++)
		if (high[i] < 0 || dup2(high[i], 3 + i) < 0)
			_exit(126);
	char *fdnames = malloc((size_t)nfds * 257 + 1), num[32];
	fdnames[0] = 0;
	for (int i = 0; i < nfds; i++) {
		if (i)
			strcat(fdnames, ":");
		strcat(fdnames, names[i]);
	}
	setenv("NOTIFY_SOCKET", sock_path, 1);
	snprintf(num, sizeof(num), "%d", maxfds);
	setenv("FDSTORE", num, 1);
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDNAMES");
	if (nfds > 0) {
		snprintf(num, sizeof(num), "%d", nfds);
		setenv("LISTEN_FDS", num, 1);
		snprintf(num, sizeof(num), "%d", (int)getpid());
		setenv("LISTEN_PID", num, 1);
		setenv("LISTEN_FDNAMES", fdnames, 1);
	}
	execv(argv[0], argv);
	_exit(127);
}

static void on_signal(int sig)
{
	if (sig == SIGUSR2)
		want_restart = 1;
	else
		want_stop = 1;
}

static void stop_child(void)
{
	int st;
	if (child <= 0)
		return;
	kill(child, SIGTERM);
	waitpid(child, &st, 0);
	last_exit_ms = mono_ms();
	child = 0;
}

static int serve(const char *sock_path, char **argv)
{
	int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strncpy(a.sun_path, sock_path, sizeof(a.sun_path) - 1);
	unlink(sock_path);
	int big = 8 << 20;
	setsockopt(sock, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	if (sock < 0 || bind(sock, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("rigfdstore: notify socket");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	start(argv, sock_path);
	write_state();
	while (!want_stop) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		poll(&p, 1, 200);
		receive(sock);
		if (want_restart) {
			want_restart = 0;
			stop_child();
			receive(sock); /* STOPPING=1 and the last removals */
			restarts++;
			start(argv, sock_path);
			write_state();
		}
		int st;
		if (child > 0 && waitpid(child, &st, WNOHANG) == child) {
			child = 0;
			last_exit_ms = mono_ms();
			write_state();
		}
	}
	receive(sock);
	stop_child();
	write_state();
	return 0;
}

static int probe(const char *portfile, const char *stopfile)
{
	int ports[MAXFDS], n = 0;
	FILE *f = fopen(portfile, "r");
	if (!f) {
		perror(portfile);
		return 1;
	}
	while (n < MAXFDS && fscanf(f, "%d", &ports[n]) == 1)
		n++;
	fclose(f);
	long rounds = 0, free_seen = 0;
	struct stat st;
	while (stat(stopfile, &st) != 0) {
		for (int i = 0; i < n; i++) {
			int s = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(ports[i]) };
			if (bind(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
				free_seen++;
				fprintf(stderr, "port %d free\n", ports[i]);
			}
			close(s);
		}
		rounds++;
	}
	printf("rounds=%ld free=%ld ports=%d\n", rounds, free_seen, n);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 7 && strcmp(argv[1], "serve") == 0 && strcmp(argv[5], "--") == 0) {
		ctldir = argv[3];
		maxfds = atoi(argv[4]);
		if (maxfds <= 0 || maxfds > MAXFDS)
			maxfds = MAXFDS;
		return serve(argv[2], argv + 6);
	}
	if (argc == 4 && strcmp(argv[1], "probe") == 0)
		return probe(argv[2], argv[3]);
	fprintf(stderr, "usage: rigfdstore serve SOCKET CTLDIR MAX -- DAEMON [ARG]...\n"
			"       rigfdstore probe PORTFILE STOPFILE\n");
	return 2;
}
