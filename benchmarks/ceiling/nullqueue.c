/*
 * nullqueue: the least a beanstalkd server can do, to measure this
 * machine's ceiling for the benchmark's scenarios.
 *
 * One thread, epoll, one FIFO of job bodies. It speaks just enough of the
 * protocol for put, reserve, reserve-with-timeout 0, delete, use, watch,
 * ignore, list-tube-used and quit: no priorities, delays, TTRs, tubes,
 * durability or limits, and delete does not even look the job up. Whatever
 * a real server does on top costs more, so no server can beat these
 * figures on the same machine with the same load generator.
 *
 * Usage: nullqueue -l ADDR -p PORT [ignored flags...]; -v prints a version.
 * Build: cc -O2 -o nullqueue nullqueue.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { INBUF = 1 << 17 };

struct job {
	struct job *next;
	unsigned long long id;
	size_t len; /* body bytes, without the CRLF */
	char body[];
};

struct conn {
	int fd;
	struct conn *next_waiter; /* in the waiting list while blocked in reserve */
	int waiting;
	size_t in_len;
	char in[INBUF];
	size_t out_len, out_cap;
	char *out;
};

static struct job *head, *tail;
static struct conn *waiters_head, *waiters_tail;
static unsigned long long next_id = 1;

static void out_append(struct conn *c, const char *p, size_t n) {
	if (c->out_len + n > c->out_cap) {
		c->out_cap = (c->out_len + n) * 2;
		c->out = realloc(c->out, c->out_cap);
		if (!c->out) abort();
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
}

static void flush(struct conn *c) {
	size_t off = 0;
	while (off < c->out_len) {
		ssize_t n = write(c->fd, c->out + off, c->out_len - off);
		if (n < 0) {
			if (errno == EINTR) continue;
			break; /* a full socket or a gone client: drop, this is a benchmark */
		}
		off += (size_t)n;
	}
	c->out_len = 0;
}

static void send_job(struct conn *c, struct job *j) {
	char line[64];
	int n = snprintf(line, sizeof line, "RESERVED %llu %zu\r\n", j->id, j->len);
	out_append(c, line, (size_t)n);
	out_append(c, j->body, j->len + 2);
	free(j);
}

static struct job *pop(void) {
	struct job *j = head;
	if (j) {
		head = j->next;
		if (!head) tail = NULL;
	}
	return j;
}

static void push(struct job *j) {
	/* a blocked reserve takes the job at once */
	struct conn *w = waiters_head;
	if (w) {
		waiters_head = w->next_waiter;
		if (!waiters_head) waiters_tail = NULL;
		w->waiting = 0;
		send_job(w, j);
		flush(w);
		return;
	}
	j->next = NULL;
	if (tail) tail->next = j; else head = j;
	tail = j;
}

static void wait_for_job(struct conn *c) {
	c->waiting = 1;
	c->next_waiter = NULL;
	if (waiters_tail) waiters_tail->next_waiter = c; else waiters_head = c;
	waiters_tail = c;
}

static void unwait(struct conn *c) {
	struct conn **p = &waiters_head, *prev = NULL;
	for (; *p; prev = *p, p = &(*p)->next_waiter) {
		if (*p == c) {
			*p = c->next_waiter;
			if (waiters_tail == c) waiters_tail = prev;
			return;
		}
	}
}

#define REPLY(c, s) out_append((c), (s), sizeof(s) - 1)

/* serve parses complete commands; it returns 0 to close the connection. */
static int serve(struct conn *c) {
	size_t pos = 0;
	while (!c->waiting) {
		char *line = c->in + pos;
		char *eol = memmem(line, c->in_len - pos, "\r\n", 2);
		if (!eol) break;
		size_t llen = (size_t)(eol - line);
		if (llen >= 4 && memcmp(line, "put ", 4) == 0) {
			unsigned long pri, delay, ttr;
			size_t bytes;
			*eol = 0;
			if (sscanf(line + 4, "%lu %lu %lu %zu", &pri, &delay, &ttr, &bytes) != 4) return 0;
			if (c->in_len - pos < llen + 2 + bytes + 2) { *eol = '\r'; break; }
			struct job *j = malloc(sizeof *j + bytes + 2);
			if (!j) abort();
			j->id = next_id++;
			j->len = bytes;
			memcpy(j->body, eol + 2, bytes + 2);
			char rep[40];
			int n = snprintf(rep, sizeof rep, "INSERTED %llu\r\n", j->id);
			out_append(c, rep, (size_t)n);
			push(j);
			pos += llen + 2 + bytes + 2;
			continue;
		}
		pos += llen + 2;
		if (llen == 7 && memcmp(line, "reserve", 7) == 0) {
			struct job *j = pop();
			if (j) send_job(c, j); else wait_for_job(c);
		} else if (llen >= 20 && memcmp(line, "reserve-with-timeout", 20) == 0) {
			struct job *j = pop();
			if (j) send_job(c, j); else REPLY(c, "TIMED_OUT\r\n");
		} else if (llen > 7 && memcmp(line, "delete ", 7) == 0) {
			REPLY(c, "DELETED\r\n");
		} else if (llen > 4 && memcmp(line, "use ", 4) == 0) {
			out_append(c, "USING ", 6);
			out_append(c, line + 4, llen - 4 + 2);
		} else if ((llen > 6 && memcmp(line, "watch ", 6) == 0) || (llen > 7 && memcmp(line, "ignore ", 7) == 0)) {
			REPLY(c, "WATCHING 1\r\n");
		} else if (llen == 14 && memcmp(line, "list-tube-used", 14) == 0) {
			REPLY(c, "USING default\r\n");
		} else if (llen == 4 && memcmp(line, "quit", 4) == 0) {
			flush(c);
			return 0;
		} else {
			REPLY(c, "UNKNOWN_COMMAND\r\n");
		}
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
	flush(c);
	return c->in_len < INBUF;
}

int main(int argc, char **argv) {
	const char *addr = "127.0.0.1";
	int port = 11300;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0) {
			puts("nullqueue (the machine's ceiling, not a server)");
			return 0;
		}
		if (strcmp(argv[i], "-l") == 0 && i + 1 < argc) addr = argv[++i];
		else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) port = atoi(argv[++i]);
	}
	signal(SIGPIPE, SIG_IGN);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) { fprintf(stderr, "nullqueue: bad address %s\n", addr); return 5; }
	if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1024)) { perror("nullqueue: bind"); return 111; }
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
	struct epoll_event evs[256];
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				int fd;
				while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
					c = calloc(1, sizeof *c);
					if (!c) abort();
					c->fd = fd;
					struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
				}
				continue;
			}
			ssize_t r = read(c->fd, c->in + c->in_len, INBUF - c->in_len);
			if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
			if (r <= 0 || (c->in_len += (size_t)r, !serve(c))) {
				if (c->waiting) unwait(c);
				close(c->fd);
				free(c->out);
				free(c);
			}
		}
	}
}
