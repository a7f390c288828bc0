/*
 * rigtool: tiny helper for the rig's negative tests, built static on the host and
 * baked into the initramfs (the guest has no compiler and no python).
 *
 *   rigtool nl-add  DEST_PORTID IP PORT [SEQ]   forged iwpm ADD_MAPPING (client IWCM)
 *   rigtool nl-remove DEST_PORTID IP PORT [SEQ] forged iwpm REMOVE_MAPPING
 *   rigtool udp IP PORT HEX                     one UDP datagram with the given bytes
 *   rigtool nl-portid                           port id of the first NETLINK_RDMA user
 *                                               socket with multicast groups (the daemon)
 *   rigtool nl-listen GROUPS SECS               bind a NETLINK_RDMA socket to the multicast
 *                                               group mask GROUPS (exit 3 if refused) and
 *                                               print every message it gets for SECS seconds
 *   rigtool nl-hello                            say HELLO (ABI 4) to the kernel as a daemon
 *                                               would, print the answers for 2 s, exit (0 if
 *                                               the kernel answered the HELLO, 4 if not)
 *   rigtool -u UID COMMAND ...                  any command above as user UID (no groups,
 *                                               no capabilities): the kernel's view of an
 *                                               unprivileged local process
 *   rigtool mute-responder                      a deliberately broken port mapper for the
 *                                               rig's self-test: says HELLO, answers REG_PID
 *                                               and ADD_MAPPING, never answers QUERY_MAPPING
 *                                               (so every connect waits for the kernel's
 *                                               timeout) and dumps nothing on SIGUSR1
 *   rigtool floor-responder                     the least work a port mapper can do on
 *                                               this kernel, the yardstick of the rig's
 *                                               compare.sh: HELLO, REG_PID and ADD_MAPPING
 *                                               as the mute responder, and QUERY_MAPPING
 *                                               answered at once with mapped = real for
 *                                               both ends (no table, no socket, no peer
 *                                               exchange; right for siw, which asks for no
 *                                               port mapping); REMOVE_MAPPING is read and
 *                                               dropped. Only a daemon-less connect is
 *                                               cheaper, and that one goes unmapped. For a
 *                                               port-mapped device (FLAGS 0: the rig's
 *                                               siw.port_map=1) it still maps every
 *                                               address to itself, but first does what any
 *                                               mapper must to hand out a port: a TCP
 *                                               socket bound to it, then closed
 *
 * The netlink messages are shaped exactly like the kernel's own (NLM_F_REQUEST, header
 * pid 0, attributes SEQ / ADDR / FLAGS) so only the sender's socket address tells them
 * apart: a daemon must look at that, not at the header.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <time.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif
#define RDMA_NL_IWCM 2
#define OP_ADD_MAPPING 1
#define OP_REG_PID 0
#define OP_QUERY_MAPPING 2
#define OP_REMOVE_MAPPING 3
#define OP_MAPINFO 6
#define OP_HELLO 8
#define ULIB_NAME "iWarpPortMapperUser"

struct buf { unsigned char b[1024]; size_t n; };

static void put_attr(struct buf *m, uint16_t type, const void *data, uint16_t len)
{
	uint16_t alen = 4 + len;
	memcpy(m->b + m->n, &alen, 2);
	memcpy(m->b + m->n + 2, &type, 2);
	memcpy(m->b + m->n + 4, data, len);
	m->n += (alen + 3u) & ~3u;
}

static int parse_ss(const char *ip, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		return 0;
	}
	return -1;
}

static int nl_forge(int op, int argc, char **argv)
{
	if (argc < 5)
		return 2;
	uint32_t dest = strtoul(argv[2], NULL, 0);
	uint32_t seq = argc > 5 ? strtoul(argv[5], NULL, 0) : 4242;
	struct sockaddr_storage ss;
	if (parse_ss(argv[3], atoi(argv[4]), &ss)) {
		fprintf(stderr, "bad address %s\n", argv[3]);
		return 2;
	}
	struct buf m = { .n = sizeof(struct nlmsghdr) };
	put_attr(&m, 1, &seq, 4);
	put_attr(&m, 2, &ss, sizeof(ss));
	if (op == OP_ADD_MAPPING) {
		uint32_t flags = 1; /* IWPM_FLAGS_NO_PORT_MAP, as siw sets it */
		put_attr(&m, 3, &flags, 4);
	}
	struct nlmsghdr *h = (struct nlmsghdr *)m.b;
	h->nlmsg_len = m.n;
	h->nlmsg_type = (RDMA_NL_IWCM << 10) | op;
	h->nlmsg_flags = NLM_F_REQUEST;
	h->nlmsg_seq = seq;
	h->nlmsg_pid = 0; /* pretend to be the kernel */

	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
		perror("bind");
		return 1;
	}
	socklen_t sl = sizeof(me);
	getsockname(fd, (struct sockaddr *)&me, &sl);
	struct sockaddr_nl to = { .nl_family = AF_NETLINK, .nl_pid = dest };
	ssize_t r = sendto(fd, m.b, m.n, 0, (struct sockaddr *)&to, sizeof(to));
	if (r < 0) {
		fprintf(stderr, "sendto port id %u: %s\n", dest, strerror(errno));
		return 1;
	}
	printf("forged %s seq=%u from port id %u to port id %u: %zd bytes\n",
	       op == OP_ADD_MAPPING ? "ADD_MAPPING" : "REMOVE_MAPPING", seq, me.nl_pid, dest, r);
	close(fd);
	return 0;
}

static int udp_send(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	struct sockaddr_storage ss;
	if (parse_ss(argv[2], atoi(argv[3]), &ss))
		return 2;
	unsigned char data[2048];
	size_t n = 0;
	const char *h = argv[4];
	while (h[0] && h[1] && n < sizeof(data)) {
		unsigned v;
		if (sscanf(h, "%2x", &v) != 1)
			return 2;
		data[n++] = v;
		h += 2;
	}
	int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	ssize_t r = sendto(fd, data, n, 0, (struct sockaddr *)&ss, sl);
	if (r < 0) {
		perror("sendto");
		return 1;
	}
	struct sockaddr_storage me;
	sl = sizeof(me);
	getsockname(fd, (struct sockaddr *)&me, &sl);
	printf("udp %zd bytes to %s:%s from port %u\n", r, argv[2], argv[3],
	       ntohs(((struct sockaddr_in *)&me)->sin_port));
	close(fd);
	return 0;
}

static int nl_portid(void)
{
	FILE *f = fopen("/proc/net/netlink", "r");
	if (!f)
		return 1;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		int proto;
		unsigned pid, groups;
		/* the first column is a kernel pointer, often printed as "(____ptrval____)" */
		if (sscanf(line, "%*s %d %u %x", &proto, &pid, &groups) == 3 &&
		    proto == NETLINK_RDMA && pid != 0 && groups != 0) {
			printf("%u\n", pid);
			fclose(f);
			return 0;
		}
	}
	fclose(f);
	return 1;
}

/* find attribute TYPE in the payload of H; returns its data and length, or NULL */
static const unsigned char *get_attr(const struct nlmsghdr *h, uint16_t type, uint16_t *len)
{
	const unsigned char *p = (const unsigned char *)NLMSG_DATA(h);
	const unsigned char *end = (const unsigned char *)h + h->nlmsg_len;
	while (p + 4 <= end) {
		uint16_t alen, atype;
		memcpy(&alen, p, 2);
		memcpy(&atype, p + 2, 2);
		if (alen < 4 || p + alen > end)
			break;
		if ((atype & 0x3fff) == type) {
			*len = alen - 4;
			return p + 4;
		}
		p += (alen + 3u) & ~3u;
	}
	return NULL;
}

static uint32_t my_portid;

static void nl_send(int fd, struct buf *m, uint16_t type, uint32_t seq)
{
	struct nlmsghdr *h = (struct nlmsghdr *)m->b;
	h->nlmsg_len = m->n;
	h->nlmsg_type = type;
	h->nlmsg_flags = NLM_F_REQUEST;
	h->nlmsg_seq = seq;
	h->nlmsg_pid = my_portid;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	if (sendto(fd, m->b, m->n, 0, (struct sockaddr *)&k, sizeof(k)) < 0)
		perror("sendto kernel");
}

/* the least a mapper does for a port-mapped request: FLAGS (attribute FLAGS_AT) present
 * and 0 means the device wants a real port, so a socket of ADDR's family is bound to ADDR's
 * port on the wildcard address and closed at once (the floor keeps nothing) */
static void reserve_if_port_mapped(const struct nlmsghdr *h, int flags_at, const unsigned char *addr)
{
	uint16_t len, flags;
	const unsigned char *f = get_attr(h, flags_at, &len);
	if (!f || len < 2)
		return;
	memcpy(&flags, f, 2);
	if (flags != 0)
		return;
	struct sockaddr_storage ss;
	memcpy(&ss, addr, sizeof(ss));
	int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in w = { .sin_family = AF_INET,
					 .sin_port = ((struct sockaddr_in *)&ss)->sin_port };
		(void)bind(s, (struct sockaddr *)&w, sizeof(w));
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 w = { .sin6_family = AF_INET6,
					  .sin6_port = ((struct sockaddr_in6 *)&ss)->sin6_port };
		(void)bind(s, (struct sockaddr *)&w, sizeof(w));
	}
	close(s);
}

/* a responder on the kernel link: ANSWER_QUERY 0 = the mute responder, 1 = the floor */
static int responder(int answer_query)
{
	signal(SIGUSR1, SIG_IGN);
	my_portid = getpid(); /* one syscall fewer per reply than asking each time */
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	struct sockaddr_nl me = { .nl_family = AF_NETLINK, .nl_pid = my_portid, .nl_groups = 3 };
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
		perror("netlink");
		return 1;
	}
	uint32_t seq = 0;
	uint16_t ver = 4;
	struct buf m = { .n = sizeof(struct nlmsghdr) };
	put_attr(&m, 1, &ver, 2);
	nl_send(fd, &m, (RDMA_NL_IWCM << 10) | OP_HELLO, seq++);
	m.n = sizeof(struct nlmsghdr);
	put_attr(&m, 1, ULIB_NAME, sizeof(ULIB_NAME));
	put_attr(&m, 2, &ver, 2);
	nl_send(fd, &m, (RDMA_NL_IWCM << 10) | OP_MAPINFO, seq++);
	for (;;) {
		unsigned char in[16384];
		ssize_t n = recv(fd, in, sizeof(in), 0);
		if (n < 0)
			continue;
		for (struct nlmsghdr *h = (struct nlmsghdr *)in; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			int op = h->nlmsg_type & 0x3ff;
			uint16_t len;
			const unsigned char *a, *dev, *r;
			uint16_t devlen, rlen, zero = 0;
			if (h->nlmsg_type < NLMSG_MIN_TYPE)
				continue;
			m.n = sizeof(struct nlmsghdr);
			if (op == OP_REG_PID && (dev = get_attr(h, 3, &devlen))) {
				put_attr(&m, 1, &h->nlmsg_seq, 4);
				put_attr(&m, 2, dev, strnlen((const char *)dev, devlen) + 1);
				put_attr(&m, 3, ULIB_NAME, sizeof(ULIB_NAME));
				put_attr(&m, 4, &ver, 2);
				put_attr(&m, 5, &zero, 2);
				nl_send(fd, &m, h->nlmsg_type, seq++);
			} else if (op == OP_ADD_MAPPING && (a = get_attr(h, 2, &len)) && len >= 128) {
				if (answer_query)
					reserve_if_port_mapped(h, 3, a);
				put_attr(&m, 1, &h->nlmsg_seq, 4);
				put_attr(&m, 2, a, 128);
				put_attr(&m, 3, a, 128);
				put_attr(&m, 4, &zero, 2);
				nl_send(fd, &m, h->nlmsg_type, seq++);
			} else if (answer_query && op == OP_QUERY_MAPPING && (a = get_attr(h, 2, &len)) &&
				   len >= 128 && (r = get_attr(h, 3, &rlen)) && rlen >= 128) {
				reserve_if_port_mapped(h, 4, a);
				/* attributes 1..6: SEQ, local, remote, mapped local = local,
				 * mapped remote = remote, MAPPING_ERR 0 (560 bytes) */
				put_attr(&m, 1, &h->nlmsg_seq, 4);
				put_attr(&m, 2, a, 128);
				put_attr(&m, 3, r, 128);
				put_attr(&m, 4, a, 128);
				put_attr(&m, 5, r, 128);
				put_attr(&m, 6, &zero, 2);
				nl_send(fd, &m, h->nlmsg_type, seq++);
			}
			/* REMOVE_MAPPING and everything else (and QUERY_MAPPING when mute): no answer */
		}
	}
}

static const char *op_name(int op)
{
	static const char *names[] = { "REG_PID", "ADD_MAPPING", "QUERY_MAPPING", "REMOVE_MAPPING",
				       "REMOTE_INFO", "HANDLE_ERR", "MAPINFO", "MAPINFO_NUM", "HELLO" };
	return op >= 0 && op < 9 ? names[op] : "?";
}

/* print every message of one datagram; returns how many were HELLO answers */
static int print_msgs(const unsigned char *in, ssize_t n)
{
	int hellos = 0;
	for (const struct nlmsghdr *h = (const void *)in; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
		if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
			int32_t e = 0;
			if (h->nlmsg_len >= NLMSG_HDRLEN + 4)
				memcpy(&e, NLMSG_DATA(h), 4);
			printf("recv %s seq=%u error=%d\n", h->nlmsg_type == NLMSG_DONE ? "DONE" : "ERROR",
			       h->nlmsg_seq, e);
			continue;
		}
		int client = h->nlmsg_type >> 10, op = h->nlmsg_type & 0x3ff;
		uint16_t len;
		const unsigned char *a;
		printf("recv client=%d op=%s seq=%u pid=%u len=%u", client, op_name(op), h->nlmsg_seq,
		       h->nlmsg_pid, h->nlmsg_len);
		if (client == RDMA_NL_IWCM && op == OP_HELLO && (a = get_attr(h, 1, &len)) && len >= 2) {
			uint16_t abi;
			memcpy(&abi, a, 2);
			printf(" abi=%u", abi);
			hellos++;
		}
		if (client == RDMA_NL_IWCM && op == OP_REG_PID && (a = get_attr(h, 3, &len)))
			printf(" dev=%.*s", (int)strnlen((const char *)a, len), a);
		printf("\n");
	}
	return hellos;
}

/* bind a NETLINK_RDMA socket (port id chosen by the kernel) to GROUPS; -errno on failure */
static int nl_open(uint32_t groups, uint32_t *portid)
{
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl me = { .nl_family = AF_NETLINK, .nl_groups = groups };
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	socklen_t sl = sizeof(me);
	getsockname(fd, (struct sockaddr *)&me, &sl);
	*portid = me.nl_pid;
	return fd;
}

/* receive and print until SECS seconds have passed; returns the HELLO answers seen */
static int nl_drain(int fd, int secs)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	time_t end = time(NULL) + secs;
	int hellos = 0;
	while (time(NULL) < end) {
		unsigned char in[8192];
		ssize_t n = recv(fd, in, sizeof(in), 0);
		if (n > 0)
			hellos += print_msgs(in, n);
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			printf("recv error: %s\n", strerror(errno));
	}
	return hellos;
}

static int nl_listen(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	uint32_t groups = strtoul(argv[2], NULL, 0), portid = 0;
	int fd = nl_open(groups, &portid);
	if (fd < 0) {
		printf("join groups=0x%x uid=%u: refused: %s\n", groups, getuid(), strerror(-fd));
		return 3;
	}
	printf("join groups=0x%x uid=%u: joined, port id %u\n", groups, getuid(), portid);
	nl_drain(fd, atoi(argv[3]));
	close(fd);
	return 0;
}

static int nl_hello(void)
{
	uint32_t portid = 0;
	int fd = nl_open(0, &portid);
	if (fd < 0) {
		printf("netlink socket uid=%u: %s\n", getuid(), strerror(-fd));
		return 1;
	}
	uint16_t ver = 4;
	struct buf m = { .n = sizeof(struct nlmsghdr) };
	put_attr(&m, 1, &ver, 2);
	struct nlmsghdr *h = (struct nlmsghdr *)m.b;
	h->nlmsg_len = m.n;
	h->nlmsg_type = (RDMA_NL_IWCM << 10) | OP_HELLO;
	h->nlmsg_flags = NLM_F_REQUEST;
	h->nlmsg_seq = 1;
	h->nlmsg_pid = portid;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	if (sendto(fd, m.b, m.n, 0, (struct sockaddr *)&k, sizeof(k)) < 0) {
		printf("send HELLO uid=%u port id %u: %s\n", getuid(), portid, strerror(errno));
		return 1;
	}
	printf("sent HELLO uid=%u port id %u\n", getuid(), portid);
	int hellos = nl_drain(fd, 2);
	close(fd);
	printf("hello answers: %d\n", hellos);
	return hellos > 0 ? 0 : 4;
}

/* become UID with no supplementary groups; a root process loses every capability */
static int drop_to(const char *uid_s)
{
	uid_t uid = strtoul(uid_s, NULL, 0);
	if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
		perror("drop privileges");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rc = 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "-u")) {
		if (drop_to(argv[2]))
			return 1;
		argv[2] = argv[0];
		argv += 2;
		argc -= 2;
	}
	if (argc >= 2 && !strcmp(argv[1], "nl-add"))
		rc = nl_forge(OP_ADD_MAPPING, argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "nl-remove"))
		rc = nl_forge(OP_REMOVE_MAPPING, argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "udp"))
		rc = udp_send(argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "nl-portid"))
		rc = nl_portid();
	else if (argc >= 2 && !strcmp(argv[1], "nl-listen"))
		rc = nl_listen(argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "nl-hello"))
		rc = nl_hello();
	else if (argc >= 2 && !strcmp(argv[1], "mute-responder"))
		rc = responder(0);
	else if (argc >= 2 && !strcmp(argv[1], "floor-responder"))
		rc = responder(1);
	if (rc == 2)
		fprintf(stderr, "usage: rigtool [-u UID] nl-add|nl-remove PORTID IP PORT [SEQ] | udp IP PORT HEX | nl-portid |"
				" nl-listen GROUPS SECS | nl-hello | mute-responder | floor-responder\n");
	return rc;
}
