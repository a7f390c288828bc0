/*
 * rigcm: a minimal librdmacm server, client and listen storm for the rig's suites; built on the
 * host against rdma-core's librdmacm (headers from the Debian -dev packages that
 * mkinitramfs.sh downloads) and linked dynamically to the initramfs' librdmacm.so.1.
 *
 *   rigcm serve IP PORT COUNT [TIMEOUT_S]
 *       listen on IP:PORT (RDMA_PS_TCP; IP is IPv4 or IPv6, wildcards included); for each of COUNT incoming connections print
 *         conn n=K peer=IP:PORT local=IP:PORT      (rdma_get_peer_addr / _local_addr of the
 *                                                   new cm_id, as the kernel reports them)
 *       accept it, wait for ESTABLISHED, disconnect. Prints "listening IP:PORT" once the
 *       listen is up; exits 0 after COUNT connections, 1 on timeout [60 s].
 *
 *   rigcm listen IP PORT COUNT [TIMEOUT_S]
 *       COUNT listeners in one process, on IP:PORT .. IP:PORT+COUNT-1 (the restart-load
 *       suite's ~100 live mappings); prints "listening N FIRST..LAST" once all are up,
 *       then accepts any number of connections on any of them (each: accept, wait for
 *       the peer's disconnect, free its QP/CQ/PD) until SIGTERM or TIMEOUT_S [600].
 *       Prints "accepted=N" on exit. Exit 1 if a listen failed.
 *
 *   rigcm connect SRC_IP:SRC_PORT DST_IP:DST_PORT [TIMEOUT_S]
 *       (IPv6 as [IP6]:PORT) bind the cm_id to SRC (port included; 0 = any), connect to DST, print
 *         connected local=IP:PORT peer=IP:PORT ms=T   or   failed EVENT status=N
 *       (T: rdma_connect -> ESTABLISHED, milliseconds), then disconnect. Exit 0 when
 *       connected.
 *
 *   rigcm storm IP COUNT [BATCH]
 *       the listen storm of compare.sh: COUNT listeners on IP, port chosen by rdma_cm, one
 *       after the other (on iWARP each rdma_listen waits for the port mapper's
 *       ADD_MAPPING reply), then all destroyed, newest first (each sends REMOVE_MAPPING).
 *       Per BATCH [500] operations one line
 *         listen live=N us_per_op=U        (N listeners up after the batch)
 *         destroy live=N us_per_op=U       (N listeners left after the batch)
 *       then "total listeners=N listen_us_per_op=U listen_max_us=M destroy_us_per_op=D".
 *       Exit 0 when all COUNT listened.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *fmt(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		port = ntohs(s->sin_port);
		snprintf(buf, len, "%s:%u", ip, port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		port = ntohs(s->sin6_port);
		snprintf(buf, len, "[%s]:%u", ip, port);
	} else {
		snprintf(buf, len, "?(family %d)", sa ? sa->sa_family : -1);
	}
	return buf;
}

/* "IP:PORT" or "[IP6]:PORT" into SS (IPv4 or IPv6); -1 if it is neither */
static int parse_ep(const char *s, struct sockaddr_storage *ss)
{
	char ip[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(ip))
		return -1;
	const char *a = s, *e = colon;
	if (*a == '[' && e > a && e[-1] == ']') {
		a++;
		e--;
	}
	memcpy(ip, a, e - a);
	ip[e - a] = 0;
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, ip, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(atoi(colon + 1));
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(atoi(colon + 1));
		return 0;
	}
	return -1;
}

/* wait for the next CM event on CH until DEADLINE (monotonic s); NULL on timeout */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, double deadline)
{
	for (;;) {
		double left = deadline - now();
		if (left <= 0)
			return NULL;
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		int r = poll(&p, 1, (int)(left * 1000) + 1);
		if (r < 0 && errno != EINTR)
			return NULL;
		if (r > 0) {
			struct rdma_cm_event *ev;
			if (rdma_get_cm_event(ch, &ev) == 0)
				return ev;
			if (errno != EAGAIN && errno != EINTR)
				return NULL;
		}
	}
}

/* an RC QP with one-entry queues on ID's device (iWARP needs a QP to connect/accept) */
static int make_qp(struct rdma_cm_id *id)
{
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
	if (!cq) {
		perror("pd/cq");
		return -1;
	}
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (rdma_create_qp(id, pd, &a)) {
		perror("rdma_create_qp");
		return -1;
	}
	return 0;
}

static int serve(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	/* IP is IPv4 or IPv6 (no brackets): "serve fd00::1 7000 1" */
	struct sockaddr_storage sin;
	char b1[80], b2[80], ep[80];
	snprintf(ep, sizeof(ep), strchr(argv[2], ':') ? "[%s]:%s" : "%s:%s", argv[2], argv[3]);
	if (parse_ep(ep, &sin))
		return 2;
	int count = atoi(argv[4]);
	double tmo = argc > 5 ? atof(argv[5]) : 60;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (rdma_bind_addr(lid, (struct sockaddr *)&sin) || rdma_listen(lid, 16)) {
		perror("bind/listen");
		return 1;
	}
	printf("listening %s\n", fmt((struct sockaddr *)&sin, b1, sizeof(b1)));
	fflush(stdout);
	double deadline = now() + tmo;
	int n = 0, done = 0;
	while (done < count) {
		struct rdma_cm_event *ev = next_event(ch, deadline);
		if (!ev) {
			printf("timeout after %d of %d connections\n", done, count);
			return 1;
		}
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		int status = ev->status;
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			n++;
			printf("conn n=%d peer=%s local=%s\n", n, fmt(rdma_get_peer_addr(id), b1, sizeof(b1)),
			       fmt(rdma_get_local_addr(id), b2, sizeof(b2)));
			fflush(stdout);
			struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1 };
			if (make_qp(id) || rdma_accept(id, &p)) {
				perror("accept");
				rdma_destroy_id(id);
				done++;
			}
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			printf("established peer=%s\n", fmt(rdma_get_peer_addr(id), b1, sizeof(b1)));
			fflush(stdout);
			rdma_disconnect(id);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
			done++;
			break;
		default:
			printf("event %s status=%d\n", rdma_event_str(t), status);
			fflush(stdout);
			if (id != lid) {
				rdma_destroy_qp(id);
				rdma_destroy_id(id);
				done++;
			}
		}
	}
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* the PD and CQ make_qp allocated for a connection's cm_id, freed with its QP */
static void free_qp(struct rdma_cm_id *id)
{
	struct ibv_qp *qp = id->qp;
	if (!qp)
		return;
	struct ibv_cq *cq = qp->send_cq;
	struct ibv_pd *pd = qp->pd;
	rdma_destroy_qp(id);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int listen_many(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1)
		return 2;
	int first = atoi(argv[3]), count = atoi(argv[4]);
	double deadline = now() + (argc > 5 ? atof(argv[5]) : 600);
	if (count < 1 || first < 1 || first + count > 65536)
		return 2;
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	for (int i = 0; i < count; i++) {
		struct rdma_cm_id *lid;
		sin.sin_port = htons(first + i);
		if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(lid, (struct sockaddr *)&sin) || rdma_listen(lid, 16)) {
			fprintf(stdout, "listen %s:%d failed: %s\n", argv[2], first + i, strerror(errno));
			return 1;
		}
	}
	printf("listening %d %s:%d..%d\n", count, argv[2], first, first + count - 1);
	fflush(stdout);
	int accepted = 0;
	while (!stop && now() < deadline) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		if (poll(&p, 1, 200) <= 0)
			continue;
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(ch, &ev))
			continue;
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		int status = ev->status;
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
			if (make_qp(id) || rdma_accept(id, &cp)) {
				perror("accept");
				free_qp(id);
				rdma_destroy_id(id);
			}
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			accepted++;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_disconnect(id);
			free_qp(id);
			rdma_destroy_id(id);
			break;
		default:
			printf("event %s status=%d\n", rdma_event_str(t), status);
			fflush(stdout);
			if (id->qp || t == RDMA_CM_EVENT_CONNECT_ERROR || t == RDMA_CM_EVENT_REJECTED ||
			    t == RDMA_CM_EVENT_UNREACHABLE) {
				free_qp(id);
				rdma_destroy_id(id);
			}
		}
	}
	printf("accepted=%d\n", accepted);
	fflush(stdout);
	return 0;
}

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, double deadline)
{
	struct rdma_cm_event *ev = next_event(ch, deadline);
	if (!ev) {
		printf("failed timeout waiting for %s\n", rdma_event_str(want));
		return -1;
	}
	enum rdma_cm_event_type t = ev->event;
	int status = ev->status;
	rdma_ack_cm_event(ev);
	if (t != want) {
		printf("failed %s status=%d (wanted %s)\n", rdma_event_str(t), status, rdma_event_str(want));
		return -1;
	}
	return 0;
}

static int connect_to(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	struct sockaddr_storage src, dst;
	char b1[80], b2[80];
	if (parse_ep(argv[2], &src) || parse_ep(argv[3], &dst))
		return 2;
	double deadline = now() + (argc > 4 ? atof(argv[4]) : 30);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 5000)) {
		perror("rdma_resolve_addr");
		return 1;
	}
	if (expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, deadline))
		return 1;
	if (rdma_resolve_route(id, 5000)) {
		perror("rdma_resolve_route");
		return 1;
	}
	if (expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline) || make_qp(id))
		return 1;
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 3 };
	double t0 = now();
	if (rdma_connect(id, &p)) {
		perror("rdma_connect");
		return 1;
	}
	if (expect(ch, RDMA_CM_EVENT_ESTABLISHED, deadline))
		return 1;
	printf("connected local=%s peer=%s ms=%.1f\n", fmt(rdma_get_local_addr(id), b1, sizeof(b1)),
	       fmt(rdma_get_peer_addr(id), b2, sizeof(b2)), (now() - t0) * 1000);
	fflush(stdout);
	rdma_disconnect(id);
	struct rdma_cm_event *ev = next_event(ch, now() + 5);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}

static double now_us(void)
{
	return now() * 1e6;
}

static int storm(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1)
		return 2;
	int count = atoi(argv[3]), batch = argc > 4 ? atoi(argv[4]) : 500;
	if (count < 1 || batch < 1)
		return 2;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id **ids = calloc(count, sizeof(*ids));
	if (!ch || !ids) {
		perror("rdma_create_event_channel");
		return 1;
	}
	int up = 0;
	double start = now_us(), mark = start, max = 0;
	while (up < count) {
		double t = now_us();
		if (rdma_create_id(ch, &ids[up], NULL, RDMA_PS_TCP)) {
			printf("listener %d: rdma_create_id: %s\n", up + 1, strerror(errno));
			break;
		}
		if (rdma_bind_addr(ids[up], (struct sockaddr *)&sin) || rdma_listen(ids[up], 1)) {
			printf("listener %d: bind/listen: %s\n", up + 1, strerror(errno));
			rdma_destroy_id(ids[up]);
			break;
		}
		t = now_us() - t;
		if (t > max)
			max = t;
		if (++up % batch == 0) {
			double e = now_us();
			printf("listen live=%d us_per_op=%.1f\n", up, (e - mark) / batch);
			mark = e;
		}
	}
	double listen_total = now_us() - start;
	fflush(stdout);
	start = mark = now_us();
	for (int left = up; left > 0;) {
		rdma_destroy_id(ids[--left]);
		if ((up - left) % batch == 0) {
			double e = now_us();
			printf("destroy live=%d us_per_op=%.1f\n", left, (e - mark) / batch);
			mark = e;
		}
	}
	double destroy_total = now_us() - start;
	printf("total listeners=%d listen_us_per_op=%.1f listen_max_us=%.0f destroy_us_per_op=%.1f\n", up,
	       up ? listen_total / up : 0, max, up ? destroy_total / up : 0);
	fflush(stdout);
	free(ids);
	rdma_destroy_event_channel(ch);
	return up == count ? 0 : 1;
}

int main(int argc, char **argv)
{
	int rc = 2;
	if (argc >= 2 && !strcmp(argv[1], "serve"))
		rc = serve(argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "listen"))
		rc = listen_many(argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "connect"))
		rc = connect_to(argc, argv);
	else if (argc >= 2 && !strcmp(argv[1], "storm"))
		rc = storm(argc, argv);
	if (rc == 2)
		fprintf(stderr, "usage: rigcm serve IP PORT COUNT [TIMEOUT_S] | "
				"listen IP FIRST_PORT COUNT [TIMEOUT_S] | connect SRC_IP:PORT DST_IP:PORT [TIMEOUT_S] | storm IP COUNT [BATCH]\n");
	return rc;
}
