/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Helpers shared by the libfabric tests: die() prints "FAIL: ..." and
 * exits 1, CHK() dies on a call that does not return 0, now() is a
 * monotonic clock in seconds, cpu_now() the thread's CPU time.
 */
#ifndef MRL_TEST_UTIL_H
#define MRL_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <time.h>

#include <rdma/fi_errno.h>

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
						      noreturn, unused));

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("FAIL: ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	exit(1);
}

#define CHK(call) do {							\
	long _r = (long) (call);					\
	if (_r)								\
		die("%s: %ld (%s)", #call, _r, fi_strerror((int) -_r));	\
} while (0)

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The thread's own CPU seconds: a timing check that must hold while make
 * check runs tests side by side. */
static inline double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The process's resident memory, in bytes (/proc/self/statm). */
static inline long rss_bytes(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return rss * sysconf(_SC_PAGESIZE);
}

#endif /* MRL_TEST_UTIL_H */
