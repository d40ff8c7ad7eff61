/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Open MPI over multirail, two ranks: what mtl/ofi and osc use of it, with
 * every byte checked where the MPI call says it is there.
 *
 *   mpi_test [pingpong] [put] [get] [fop]   (default: all four)
 *   mpi_test bw [MESSAGES [SIZE [WINDOW]]]
 *
 *   pingpong  1 B to 4 MiB (factors of 4, plus odd sizes), random bytes;
 *             rank 1 checks each message as MPI_Recv returns, sends it
 *             back, rank 0 checks the echo.
 *   put       4 times: rank 0 MPI_Puts 4 MiB of random bytes (and 3 bytes
 *             at an odd offset) into rank 1's MPI_Win_create window; rank
 *             1 checks every byte after the closing fence.
 *   get       4 times: rank 1 fills its window; rank 0 MPI_Gets it back
 *             after a fence and checks every byte after the closing
 *             fence.
 *   fop       both ranks MPI_Fetch_and_op(MPI_SUM) 1 on a 64-bit counter
 *             in rank 1's window 1000 times each (passive target, lock
 *             shared); every fetched value is distinct and the final
 *             count is 2000.
 *
 *   bw        (only when asked) rank 0 sends MESSAGES (default 200)
 *             messages of SIZE bytes (default 4 MiB), WINDOW (16) in
 *             flight (MPI_Isend), rank 1 keeps WINDOW MPI_Irecvs posted
 *             and checks every byte of each message as it completes (its
 *             number in its first 8 bytes, then a pattern of that
 *             number), so any loss, duplicate or reordering is a wrong
 *             byte; prints "bw: N x SIZE B, W in flight: X MB/s" (10^6
 *             bytes a second, from the first receive posted to the last
 *             checked).
 *
 * MPI_Win_create (not MPI_Win_allocate, which Open MPI places in shared
 * memory for ranks of one host) so that the window is reached through the
 * fabric.  Prints "ok NAME" per check and "PASS" at the end; a wrong byte
 * or a failed call prints "FAIL: ..." and aborts the job.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define MAX_SIZE	(4u << 20)
#define FOP_COUNT	1000
#define ROUNDS		4	/* puts and gets: the first may find the
				 * target's keys for the other rails not
				 * learned yet, and use rail 0 alone */

static int rank;

static void fail(const char *fmt, const char *what, long v)
{
	printf("FAIL: rank %d: ", rank);
	printf(fmt, what, v);
	printf("\n");
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* xorshift bytes: the same (seed, i) gives the same byte on both ranks */
static void fill(unsigned char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char) x;
	}
}

/* the first wrong byte's index, or -1 */
static long first_wrong(const unsigned char *p, size_t len, uint64_t seed)
{
	unsigned char *want = malloc(len ? len : 1);
	long bad = -1;
	size_t i;

	if (!want)
		fail("%s: %ld", "out of memory", (long) len);
	fill(want, len, seed);
	for (i = 0; i < len && bad < 0; i++)
		if (p[i] != want[i])
			bad = (long) i;
	free(want);
	return bad;
}

static void pingpong(unsigned char *buf)
{
	static const size_t odd[] = { 7, 4095, 65537, 1048577 };
	size_t size, sizes[32];
	int n = 0, i;
	long bad;

	for (size = 1; size <= MAX_SIZE; size *= 4)
		sizes[n++] = size;
	for (i = 0; i < 4; i++)
		sizes[n++] = odd[i];
	for (i = 0; i < n; i++) {
		uint64_t seed = 1000 + (uint64_t) i;

		if (rank == 0) {
			fill(buf, sizes[i], seed);
			MPI_Send(buf, (int) sizes[i], MPI_BYTE, 1, i,
				 MPI_COMM_WORLD);
			memset(buf, 0xA5, sizes[i]);
			MPI_Recv(buf, (int) sizes[i], MPI_BYTE, 1, i,
				 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad = first_wrong(buf, sizes[i], seed);
			if (bad >= 0)
				fail("%s: byte %ld of the echo wrong",
				     "pingpong", bad);
		} else {
			memset(buf, 0xA5, sizes[i]);
			MPI_Recv(buf, (int) sizes[i], MPI_BYTE, 0, i,
				 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad = first_wrong(buf, sizes[i], seed);
			if (bad >= 0)
				fail("%s: byte %ld of the message wrong",
				     "pingpong", bad);
			MPI_Send(buf, (int) sizes[i], MPI_BYTE, 0, i,
				 MPI_COMM_WORLD);
		}
	}
	if (rank == 0)
		printf("ok pingpong: %d sizes, 1 B to %u B, every byte\n", n,
		       MAX_SIZE);
}

static void put(unsigned char *win_buf, MPI_Win win)
{
	unsigned char *src = malloc(MAX_SIZE);
	uint64_t seed;
	long bad;
	int i;

	if (!src)
		fail("%s: %ld", "out of memory", 0);
	for (i = 0; i < ROUNDS; i++) {
		seed = 7 + (uint64_t) i;
		memset(win_buf, 0xA5, MAX_SIZE + 64);
		MPI_Win_fence(0, win);
		if (rank == 0) {
			fill(src, MAX_SIZE, seed);
			MPI_Put(src, MAX_SIZE, MPI_BYTE, 1, 0, MAX_SIZE,
				MPI_BYTE, win);
			MPI_Put(src, 3, MPI_BYTE, 1, MAX_SIZE + 13, 3,
				MPI_BYTE, win);
		}
		MPI_Win_fence(0, win);
		if (rank != 1)
			continue;
		bad = first_wrong(win_buf, MAX_SIZE, seed);
		if (bad >= 0)
			fail("%s: byte %ld wrong after the fence", "put", bad);
		if (first_wrong(win_buf + MAX_SIZE + 13, 3, seed) >= 0 ||
		    win_buf[MAX_SIZE + 12] != 0xA5 ||
		    win_buf[MAX_SIZE + 16] != 0xA5)
			fail("%s: the 3-byte put at offset %ld wrong", "put",
			     (long) MAX_SIZE + 13);
	}
	if (rank == 1)
		printf("ok put: %d x (%u B, and 3 B at an odd offset), every "
		       "byte\n", ROUNDS, MAX_SIZE);
	free(src);
}

static void get(unsigned char *win_buf, MPI_Win win)
{
	unsigned char *dst = malloc(MAX_SIZE);
	uint64_t seed;
	long bad;
	int i;

	if (!dst)
		fail("%s: %ld", "out of memory", 0);
	for (i = 0; i < ROUNDS; i++) {
		seed = 11 + (uint64_t) i;
		memset(dst, 0xA5, MAX_SIZE);
		if (rank == 1)
			fill(win_buf, MAX_SIZE, seed);
		MPI_Win_fence(0, win);
		if (rank == 0)
			MPI_Get(dst, MAX_SIZE, MPI_BYTE, 1, 0, MAX_SIZE,
				MPI_BYTE, win);
		MPI_Win_fence(0, win);
		if (rank != 0)
			continue;
		bad = first_wrong(dst, MAX_SIZE, seed);
		if (bad >= 0)
			fail("%s: byte %ld wrong after the fence", "get", bad);
	}
	if (rank == 0)
		printf("ok get: %d x %u B, every byte\n", ROUNDS, MAX_SIZE);
	free(dst);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

static void fop(int64_t *counter, MPI_Win win)
{
	int64_t one = 1, *seen = malloc(2 * FOP_COUNT * sizeof(*seen));
	int i;

	if (!seen)
		fail("%s: %ld", "out of memory", 0);
	*counter = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (i = 0; i < FOP_COUNT; i++) {
		MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
		MPI_Fetch_and_op(&one, &seen[i], MPI_INT64_T, 1, 0, MPI_SUM,
				 win);
		MPI_Win_unlock(1, win);
	}
	MPI_Gather(rank ? seen : MPI_IN_PLACE, FOP_COUNT, MPI_INT64_T,
		   seen, FOP_COUNT, MPI_INT64_T, 0, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 1) {
		/* the target's own view, in an epoch of its own */
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
		MPI_Win_sync(win);
		if (*counter != 2 * FOP_COUNT)
			fail("%s: the counter is %ld", "fop", (long) *counter);
		MPI_Win_unlock(1, win);
	}
	if (rank == 0) {
		qsort(seen, 2 * FOP_COUNT, sizeof(*seen), cmp_i64);
		for (i = 0; i < 2 * FOP_COUNT; i++)
			if (seen[i] != i)
				fail("%s: fetched values not 0..1999 once "
				     "each (at %ld)", "fop", (long) i);
		printf("ok fop: %d fetch-and-adds, every value fetched "
		       "once\n", 2 * FOP_COUNT);
	}
	free(seen);
}

/* message i of the bandwidth run: its number, then words of it mixed */
static void bw_fill(uint64_t *w, size_t words, uint64_t i)
{
	size_t j;

	w[0] = i;
	for (j = 1; j < words; j++)
		w[j] = (i + 1) * 0x9E3779B97F4A7C15ull ^ (j * 0xD6E8FEB86659FD93ull);
}

static long bw_first_wrong(const uint64_t *w, size_t words, uint64_t i)
{
	size_t j;

	if (w[0] != i)
		return 0;
	for (j = 1; j < words; j++)
		if (w[j] != ((i + 1) * 0x9E3779B97F4A7C15ull ^
			     (j * 0xD6E8FEB86659FD93ull)))
			return (long) (j * 8);
	return -1;
}

static void bw(long n, size_t size, int window)
{
	size_t words = size / 8;
	uint64_t **buf = calloc((size_t) window, sizeof(*buf));
	MPI_Request *req = calloc((size_t) window, sizeof(*req));
	long next = 0, done = 0, bad;
	double t0, t1;
	int k;

	if (!buf || !req || words < 1 || window < 1)
		fail("%s: %ld", "bw setup", (long) size);
	for (k = 0; k < window; k++) {
		buf[k] = malloc(words * 8);
		if (!buf[k])
			fail("%s: %ld", "out of memory", (long) size);
		req[k] = MPI_REQUEST_NULL;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	/* slot k holds message k, k + window, ...: each in its turn */
	for (k = 0; k < window && next < n; k++, next++) {
		if (rank == 0) {
			bw_fill(buf[k], words, (uint64_t) next);
			MPI_Isend(buf[k], (int) (words * 8), MPI_BYTE, 1, 7,
				  MPI_COMM_WORLD, &req[k]);
		} else {
			memset(buf[k], 0xA5, words * 8);
			MPI_Irecv(buf[k], (int) (words * 8), MPI_BYTE, 0, 7,
				  MPI_COMM_WORLD, &req[k]);
		}
	}
	while (done < n) {
		k = (int) (done % window);
		MPI_Wait(&req[k], MPI_STATUS_IGNORE);
		if (rank == 1) {
			bad = bw_first_wrong(buf[k], words, (uint64_t) done);
			if (bad >= 0)
				fail("%s: message %ld wrong", "bw", done);
		}
		done++;
		if (next < n) {
			if (rank == 0) {
				bw_fill(buf[k], words, (uint64_t) next);
				MPI_Isend(buf[k], (int) (words * 8), MPI_BYTE,
					  1, 7, MPI_COMM_WORLD, &req[k]);
			} else {
				memset(buf[k], 0xA5, words * 8);
				MPI_Irecv(buf[k], (int) (words * 8), MPI_BYTE,
					  0, 7, MPI_COMM_WORLD, &req[k]);
			}
			next++;
		}
	}
	t1 = MPI_Wtime();
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 1)
		printf("ok bw: %ld x %zu B, %d in flight: %.1f MB/s, every "
		       "byte\n", n, words * 8, window,
		       (double) n * (double) (words * 8) / (t1 - t0) / 1e6);
	for (k = 0; k < window; k++)
		free(buf[k]);
	free(buf);
	free(req);
}

static int wants(int argc, char **argv, const char *name)
{
	int i;

	if (argc < 2)
		return 1;
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned char *buf, *win_buf;
	int64_t *counter;
	MPI_Win win, cwin;
	int size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2)
		fail("%s: %ld ranks, want 2", "setup", (long) size);
	if (argc > 1 && !strcmp(argv[1], "bw")) {
		bw(argc > 2 ? atol(argv[2]) : 200,
		   argc > 3 ? (size_t) atol(argv[3]) : MAX_SIZE,
		   argc > 4 ? atoi(argv[4]) : 16);
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0)
			printf("PASS\n");
		MPI_Finalize();
		return 0;
	}
	buf = malloc(MAX_SIZE);
	win_buf = malloc(MAX_SIZE + 64);
	counter = malloc(sizeof(*counter));
	if (!buf || !win_buf || !counter)
		fail("%s: %ld", "out of memory", 0);
	MPI_Win_create(win_buf, MAX_SIZE + 64, 1, MPI_INFO_NULL,
		       MPI_COMM_WORLD, &win);
	MPI_Win_create(counter, sizeof(*counter), sizeof(*counter),
		       MPI_INFO_NULL, MPI_COMM_WORLD, &cwin);
	if (wants(argc, argv, "pingpong"))
		pingpong(buf);
	if (wants(argc, argv, "put"))
		put(win_buf, win);
	if (wants(argc, argv, "get"))
		get(win_buf, win);
	if (wants(argc, argv, "fop"))
		fop(counter, cwin);
	MPI_Win_free(&cwin);
	MPI_Win_free(&win);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS\n");
	free(buf);
	free(win_buf);
	free(counter);
	MPI_Finalize();
	return 0;
}
