/*
 * bindprobe: can an ordinary socket of this host take these TCP ports? Used by the system
 * test to show that the ports iwpmd reserved for port-mapped connections stay held while
 * the daemon restarts (the FD store holds them when no daemon does).
 *
 *   bindprobe PORT...                 one attempt per port; exit 0 if every bind failed
 *                                     with EADDRINUSE, 1 if any port could be bound
 *   bindprobe -u STOPFILE PORT...     attempt again and again until STOPFILE exists
 *                                     (at most 120 s); exit as above, and print how many
 *                                     rounds ran and every port that was ever free
 *
 * Binds 0.0.0.0:PORT without SO_REUSEADDR and closes at once (no listen).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* 0: held by someone (EADDRINUSE); 1: we could bind it; -1: another error */
static int try_bind(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), rc;

	if (fd < 0) {
		perror("socket");
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		rc = 1;
	else if (errno == EADDRINUSE)
		rc = 0;
	else {
		fprintf(stderr, "bind :%d: %s\n", port, strerror(errno));
		rc = -1;
	}
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	const char *stop = NULL;
	int first = 1, n, i, bad = 0;
	long rounds = 0;
	int *ports, *freed;
	time_t t0 = time(NULL);

	if (argc > 2 && strcmp(argv[1], "-u") == 0) {
		stop = argv[2];
		first = 3;
	}
	n = argc - first;
	if (n < 1) {
		fprintf(stderr, "usage: bindprobe [-u STOPFILE] PORT...\n");
		return 2;
	}
	ports = calloc((size_t)n, sizeof(int));
	freed = calloc((size_t)n, sizeof(int));
	for (i = 0; i < n; i++)
		ports[i] = atoi(argv[first + i]);
	do {
		for (i = 0; i < n; i++) {
			int r = try_bind(ports[i]);
			if (r != 0) {
				freed[i]++;
				bad = 1;
			}
		}
		rounds++;
	} while (stop && access(stop, F_OK) != 0 && time(NULL) - t0 < 120);
	for (i = 0; i < n; i++)
		if (freed[i])
			printf("port %d could be bound in %d of %ld rounds\n", ports[i], freed[i], rounds);
	printf("bindprobe: %ld rounds over %d ports, %s\n", rounds, n, bad ? "SOME PORT WAS FREE" : "every bind refused");
	return bad;
}
