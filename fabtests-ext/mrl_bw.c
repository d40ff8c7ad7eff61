/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_multirail_bw (mrl_bw.c): RMA and tagged-message bandwidth test,
 * fabtests style, written against the public libfabric API only.
 *
 * The client is the initiator: it issues fi_write / fi_writedata / fi_read
 * against a buffer registered by the server (the target), or fi_tsend into
 * receives the target keeps posted over that buffer, keeping up to -W
 * operations outstanding.  Everything out of band (endpoint names, the
 * target buffer's address/key, a per-size begin/done/ack handshake) goes
 * over one TCP socket, so the test never passes a peer's address to
 * fi_getinfo.
 *
 *   server:  fi_multirail_bw [-p PROV] [-s SRC] [options]
 *   client:  fi_multirail_bw [-p PROV] [-s SRC] [options] SERVER_ADDR
 *
 * Exit status: 0 on success, 1 on any error, timeout or verification failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_ext_multirail.h>

#define DEFAULT_PORT	47592
#define MAX_SIZES	64
#define MAX_ALL_SIZE	(64UL << 20)
#define DEFAULT_BYTES	(256UL << 20)	/* default bytes per size */
#define MAX_DEF_ITERS	100000UL
#define MIN_ITERS	10UL
#define MAX_WINDOW	8192
#define CQ_BATCH	32
#define MR_KEY_USER	0xC0DE

enum op_type { OP_WRITE, OP_WRITEDATA, OP_READ, OP_TSEND };
static const char *op_names[] = { "write", "writedata", "read", "tsend" };

enum msg_type {
	OOB_HELLO = 0x4d524c31,	/* c->s: status = op | verify << 8, size = buffer size */
	OOB_BEGIN = 1,	/* c->s: size, count = timed iters, seq = first cq data, status = warmup */
	OOB_READY,	/* s->c */
	OOB_DONE,	/* c->s: size, count = ops issued (warmup + timed) */
	OOB_ACK,	/* s->c: status = 0 ok, else error */
	OOB_FIN,	/* c->s: end of test */
	OOB_SYNCED,	/* s->c: device synchronised after DONE (HELLO_SYNC) */
};

/* HELLO's status: op in the low byte, then these */
#define HELLO_VERIFY	0x100
#define HELLO_SYNC	0x200	/* the client's clock stops at OOB_SYNCED */

struct oob_msg {
	uint32_t type;
	uint32_t status;
	uint64_t size;
	uint64_t count;
	uint64_t seq;
};

/* options */
static struct {
	char *prov;
	char *domain;
	char *src;
	char *dst;
	bool src_oob_only;
	uint16_t port;
	enum op_type op;
	size_t sizes[MAX_SIZES];
	int nsizes;
	size_t window;
	size_t iters;		/* 0 = automatic */
	size_t warmup;
	double warmup_secs;	/* keep warming up at least this long */
	bool verify;
	char *csv;
	char *label;
	double max_secs;
	bool quiet;
	bool cuda;		/* -D cuda: the buffer in GPU memory */
	int cuda_dev;		/* -i */
	bool sync_target;	/* the client waits for OOB_SYNCED */
	enum fi_threading threading;	/* -t; 0: the provider's choice */
	size_t empty_polls;	/* -E: the client's CQ polls after the run */
	bool memory;		/* -M: resident memory at each stage */
} opt = {
	.port = DEFAULT_PORT,
	.op = OP_WRITE,
	.window = 64,
	.warmup = 10,
	.max_secs = 60.0,
};

/* libfabric state */
static struct fi_info *fi;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static void *mr_desc;
static fi_addr_t peer;
static bool mr_raw;
static bool remote_key_mapped;

static char *buf;
static size_t buf_size;
static int sock = -1;

/* remote buffer */
static uint64_t rbuf_addr;	/* address to use in RMA calls (VA or 0) */
static uint64_t rkey;

/* operations in flight */
static struct fi_context2 *ctxs;
static size_t *free_slots;
static size_t nfree;
static size_t outstanding;

/* writedata tracking at the target */
static uint64_t cq_data_mask;
static uint8_t *seen;		/* bitmap of received cq data values */
static size_t seen_cap;		/* number of bits */
static uint64_t seen_base;	/* first value expected (masked) */
static size_t seen_count;
static size_t seen_bad;
static size_t other_events;

static uint64_t global_seq = 1;

/*
 * -o tsend: the target keeps TSEND_RECVS tagged receives of the whole
 * buffer posted, each message landing over the last (the same pattern),
 * and counts them.
 */
#define TSEND_TAG	0x5eed
#define TSEND_RECVS	64
static struct fi_context2 rctxs[TSEND_RECVS];
static bool recvs_posted;
static size_t tsend_received;

static bool is_client(void) { return opt.dst != NULL; }

static void errmsg(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fi_multirail_bw[%s]: ", is_client() ? "client" : "server");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define FI_ERR(call, ret) \
	errmsg("%s: %s (%d)", call, fi_strerror((int)-(ret)), (int)(ret))

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ */
/* data pattern: xorshift64*, seeded per (op, size)                     */

static uint64_t pattern_seed(size_t size)
{
	uint64_t s = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)size * 0xBF58476D1CE4E5B9ULL) ^
		     ((uint64_t)(opt.op + 1) << 56);
	return s ? s : 1;
}

static inline uint64_t xs_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static void pattern_fill(char *p, size_t size)
{
	uint64_t s = pattern_seed(size), v;
	size_t i;

	for (i = 0; i + 8 <= size; i += 8) {
		v = xs_next(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < size) {
		v = xs_next(&s);
		memcpy(p + i, &v, size - i);
	}
}

/* returns -1 when the buffer holds the pattern, else the first bad offset */
static long pattern_check(const char *p, size_t size)
{
	uint64_t s = pattern_seed(size), v;
	size_t i, j;

	for (i = 0; i + 8 <= size; i += 8) {
		v = xs_next(&s);
		if (memcmp(p + i, &v, 8)) {
			for (j = 0; j < 8; j++)
				if (p[i + j] != ((char *)&v)[j])
					return (long)(i + j);
		}
	}
	if (i < size) {
		v = xs_next(&s);
		for (j = 0; i + j < size; j++)
			if (p[i + j] != ((char *)&v)[j])
				return (long)(i + j);
	}
	return -1;
}

static void poison(char *p, size_t size)
{
	memset(p, 0xA5, size);
}

/* ------------------------------------------------------------------ */
/* device memory (-D cuda): the CUDA runtime, loaded with dlopen        */

/*
 * The buffer then lives on the GPU and is never touched by the host: the
 * pattern is written into, and checked from, a host copy moved with
 * cudaMemcpy.  A core may move GPU memory with copies that return before
 * the bytes did, so both sides synchronise the device before the clock
 * stops (OOB_SYNCED).
 */
#define CUDA_H2D	1	/* cudaMemcpyHostToDevice */
#define CUDA_D2H	2	/* cudaMemcpyDeviceToHost */

static struct {
	void *lib;
	int (*set_device)(int);
	int (*malloc)(void **, size_t);
	int (*free)(void *);
	int (*memcpy)(void *, const void *, size_t, int);
	int (*memset)(void *, int, size_t);
	int (*synchronize)(void);
	char *host;		/* the host copy of the buffer */
} cuda;

static int cuda_load(void)
{
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"libcudart.so.11.0",
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !cuda.lib; i++)
		cuda.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!cuda.lib) {
		errmsg("-D cuda: cannot load libcudart (%s)", dlerror());
		return -1;
	}
	*(void **)&cuda.set_device = dlsym(cuda.lib, "cudaSetDevice");
	*(void **)&cuda.malloc = dlsym(cuda.lib, "cudaMalloc");
	*(void **)&cuda.free = dlsym(cuda.lib, "cudaFree");
	*(void **)&cuda.memcpy = dlsym(cuda.lib, "cudaMemcpy");
	*(void **)&cuda.memset = dlsym(cuda.lib, "cudaMemset");
	*(void **)&cuda.synchronize = dlsym(cuda.lib, "cudaDeviceSynchronize");
	if (!cuda.set_device || !cuda.malloc || !cuda.free || !cuda.memcpy ||
	    !cuda.memset || !cuda.synchronize) {
		errmsg("-D cuda: libcudart lacks a function we need");
		return -1;
	}
	if (cuda.set_device(opt.cuda_dev)) {
		errmsg("-D cuda: cudaSetDevice(%d) failed", opt.cuda_dev);
		return -1;
	}
	return 0;
}

static int buf_alloc(size_t size)
{
	if (!opt.cuda) {
		if (posix_memalign((void **)&buf, 4096, size))
			return -1;
		memset(buf, 0, size);
		return 0;
	}
	cuda.host = malloc(size);
	if (!cuda.host || cuda.malloc((void **)&buf, size)) {
		buf = NULL;
		return -1;
	}
	return cuda.memset(buf, 0, size) ? -1 : 0;
}

static void buf_free(void)
{
	if (opt.cuda && buf)
		cuda.free(buf);
	else
		free(buf);
	free(cuda.host);
	buf = NULL;
}

static void buf_fill(size_t size)
{
	if (!opt.cuda) {
		pattern_fill(buf, size);
		return;
	}
	pattern_fill(cuda.host, size);
	if (cuda.memcpy(buf, cuda.host, size, CUDA_H2D))
		errmsg("cudaMemcpy to the device failed");
}

static void buf_poison(size_t size)
{
	if (!opt.cuda)
		poison(buf, size);
	else if (cuda.memset(buf, 0xA5, size))
		errmsg("cudaMemset failed");
}

/* As pattern_check, of the buffer wherever it lives. */
static long buf_check(size_t size)
{
	if (!opt.cuda)
		return pattern_check(buf, size);
	if (cuda.memcpy(cuda.host, buf, size, CUDA_D2H)) {
		errmsg("cudaMemcpy from the device failed");
		return 0;
	}
	return pattern_check(cuda.host, size);
}

static int device_sync(void)
{
	if (opt.cuda && cuda.synchronize()) {
		errmsg("cudaDeviceSynchronize failed");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* out-of-band socket                                                   */

static int sock_wait(short events, double deadline)
{
	struct pollfd pfd = { .fd = sock, .events = events };
	int ret, ms;

	for (;;) {
		ms = (int)((deadline - now()) * 1000);
		if (ms < 0)
			return -ETIMEDOUT;
		ret = poll(&pfd, 1, ms > 1000 ? 1000 : ms);
		if (ret > 0)
			return 0;
		if (ret < 0 && errno != EINTR)
			return -errno;
	}
}

static int sock_send(const void *data, size_t len)
{
	const char *p = data;
	ssize_t n;
	double deadline = now() + opt.max_secs;

	while (len) {
		n = send(sock, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && !sock_wait(POLLOUT, deadline))
				continue;
			errmsg("oob send: %s", strerror(errno));
			return -1;
		}
		p += n;
		len -= n;
	}
	return 0;
}

static int sock_recv(void *data, size_t len, double timeout)
{
	char *p = data;
	ssize_t n;
	double deadline = now() + timeout;
	int ret;

	while (len) {
		ret = sock_wait(POLLIN, deadline);
		if (ret) {
			errmsg("oob recv: %s", ret == -ETIMEDOUT ? "timed out" : strerror(-ret));
			return -1;
		}
		n = recv(sock, p, len, 0);
		if (n == 0) {
			errmsg("oob recv: peer closed the connection");
			return -1;
		}
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			errmsg("oob recv: %s", strerror(errno));
			return -1;
		}
		p += n;
		len -= n;
	}
	return 0;
}

static int send_blob(const void *data, uint32_t len)
{
	uint32_t nlen = htonl(len);

	if (sock_send(&nlen, sizeof(nlen)))
		return -1;
	return len ? sock_send(data, len) : 0;
}

static int recv_blob(void **data, uint32_t *len)
{
	uint32_t nlen;

	if (sock_recv(&nlen, sizeof(nlen), opt.max_secs))
		return -1;
	*len = ntohl(nlen);
	if (*len > (1U << 20)) {
		errmsg("oob: blob of %u bytes is too big", *len);
		return -1;
	}
	*data = calloc(1, *len + 1);
	if (!*data)
		return -1;
	if (*len && sock_recv(*data, *len, opt.max_secs)) {
		free(*data);
		return -1;
	}
	return 0;
}

static int send_msg(uint32_t type, uint32_t status, uint64_t size, uint64_t count, uint64_t seq)
{
	struct oob_msg m = {
		.type = htonl(type), .status = htonl(status),
		.size = htobe64(size), .count = htobe64(count), .seq = htobe64(seq),
	};

	return sock_send(&m, sizeof(m));
}

static void msg_decode(struct oob_msg *m)
{
	m->type = ntohl(m->type);
	m->status = ntohl(m->status);
	m->size = be64toh(m->size);
	m->count = be64toh(m->count);
	m->seq = be64toh(m->seq);
}

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res;
	char service[16];
	int ret;

	snprintf(service, sizeof(service), "%u", port);
	if (!host)
		hints.ai_flags |= AI_PASSIVE;
	ret = getaddrinfo(host, service, &hints, &res);
	if (ret) {
		errmsg("getaddrinfo(%s): %s", host ? host : "*", gai_strerror(ret));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int oob_connect(void)
{
	struct sockaddr_storage ss, src;
	socklen_t len, srclen;
	double deadline = now() + opt.max_secs;
	int one = 1, ret, lsock;

	if (is_client()) {
		if (resolve(opt.dst, opt.port, &ss, &len))
			return -1;
		if (opt.src && resolve(opt.src, 0, &src, &srclen))
			return -1;
		/* the server may not listen yet: retry, bounded */
		for (;;) {
			sock = socket(ss.ss_family, SOCK_STREAM, 0);
			if (sock < 0) {
				errmsg("socket: %s", strerror(errno));
				return -1;
			}
			if (opt.src && bind(sock, (struct sockaddr *)&src, srclen)) {
				errmsg("bind oob socket to %s: %s", opt.src, strerror(errno));
				return -1;
			}
			if (!connect(sock, (struct sockaddr *)&ss, len))
				break;
			ret = errno;
			close(sock);
			sock = -1;
			if (now() > deadline) {
				errmsg("connect to %s:%u: %s (gave up after %.0f s)",
				       opt.dst, opt.port, strerror(ret), opt.max_secs);
				return -1;
			}
			usleep(100000);
		}
	} else {
		if (resolve(opt.src, opt.port, &ss, &len))
			return -1;
		lsock = socket(ss.ss_family, SOCK_STREAM, 0);
		if (lsock < 0) {
			errmsg("socket: %s", strerror(errno));
			return -1;
		}
		setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lsock, (struct sockaddr *)&ss, len) || listen(lsock, 1)) {
			errmsg("bind/listen oob %s:%u: %s", opt.src ? opt.src : "*", opt.port,
			       strerror(errno));
			close(lsock);
			return -1;
		}
		sock = lsock;
		ret = sock_wait(POLLIN, deadline);
		sock = -1;
		if (ret) {
			errmsg("no client connected within %.0f s", opt.max_secs);
			close(lsock);
			return -1;
		}
		sock = accept(lsock, NULL, NULL);
		close(lsock);
		if (sock < 0) {
			errmsg("accept: %s", strerror(errno));
			return -1;
		}
	}
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

/* ------------------------------------------------------------------ */
/* completions                                                          */

static void record_cq_data(uint64_t data)
{
	uint64_t idx = (data - seen_base) & cq_data_mask;

	if (!seen || idx >= seen_cap || (seen[idx / 8] & (1u << (idx % 8)))) {
		if (seen_bad < 5)
			errmsg("unexpected or duplicate remote cq data 0x%" PRIx64, data);
		seen_bad++;
		return;
	}
	seen[idx / 8] |= (uint8_t)(1u << (idx % 8));
	seen_count++;
}

static ssize_t post_recv(struct fi_context2 *ctx)
{
	return fi_trecv(ep, buf, buf_size, mr_desc, FI_ADDR_UNSPEC, TSEND_TAG, 0, ctx);
}

/* A receive is back: counted, and posted again. */
static int recv_done(struct fi_context2 *ctx)
{
	ssize_t ret;

	tsend_received++;
	do
		ret = post_recv(ctx);
	while (ret == -FI_EAGAIN && fi_cq_read(cq, NULL, 0) != -FI_EAVAIL);
	if (ret)
		FI_ERR("fi_trecv", ret);
	return (int)ret;
}

/* Read the CQ once; returns number of entries handled, or negative error. */
static int progress(void)
{
	struct fi_cq_data_entry comp[CQ_BATCH];
	struct fi_cq_err_entry err;
	ssize_t ret, i;
	size_t slot;

	ret = fi_cq_read(cq, comp, CQ_BATCH);
	if (ret == -FI_EAGAIN)
		return 0;
	if (ret == -FI_EAVAIL) {
		memset(&err, 0, sizeof(err));
		ret = fi_cq_readerr(cq, &err, 0);
		if (ret < 0) {
			FI_ERR("fi_cq_readerr", ret);
			return (int)ret;
		}
		errmsg("completion error: %s (%d), prov_errno %d: %s", fi_strerror(err.err), err.err,
		       err.prov_errno, fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0));
		return -FI_EIO;
	}
	if (ret < 0) {
		FI_ERR("fi_cq_read", ret);
		return (int)ret;
	}
	for (i = 0; i < ret; i++) {
		if (comp[i].flags & FI_REMOTE_CQ_DATA) {
			record_cq_data(comp[i].data & cq_data_mask);
			continue;
		}
		if (comp[i].op_context >= (void *)rctxs &&
		    comp[i].op_context < (void *)(rctxs + TSEND_RECVS)) {
			if (recv_done(comp[i].op_context))
				return -FI_EIO;
			continue;
		}
		if (comp[i].op_context >= (void *)ctxs &&
		    comp[i].op_context < (void *)(ctxs + opt.window)) {
			slot = (struct fi_context2 *)comp[i].op_context - ctxs;
			free_slots[nfree++] = slot;
			outstanding--;
			continue;
		}
		other_events++;
	}
	return (int)ret;
}

/* Progress the CQ until a message is readable on the socket. */
static int wait_msg(struct oob_msg *m, double timeout)
{
	double deadline = now() + timeout;
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	unsigned spins = 0;
	int ret;

	for (;;) {
		ret = progress();
		if (ret < 0)
			return ret;
		if (ret == 0 && (++spins & 63) == 0) {
			ret = poll(&pfd, 1, 0);
			if (ret > 0)
				break;
			if (now() > deadline) {
				errmsg("timed out (%.0f s) waiting for the peer", timeout);
				return -1;
			}
			sched_yield();
		}
	}
	if (sock_recv(m, sizeof(*m), timeout))
		return -1;
	msg_decode(m);
	return 0;
}

static int expect_msg(struct oob_msg *m, uint32_t type, double timeout)
{
	if (wait_msg(m, timeout))
		return -1;
	if (m->type != type) {
		errmsg("protocol error: got message %u, expected %u", m->type, type);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* libfabric setup                                                      */

static int register_buf(void)
{
	struct iovec iov = { buf, buf_size };
	struct fi_mr_attr attr = {
		.mr_iov = &iov,
		.iov_count = 1,
		.access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
		.requested_key = (fi->domain_attr->mr_mode & FI_MR_PROV_KEY) ? 0 : MR_KEY_USER,
		.iface = opt.cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM,
	};
	uint64_t flags = 0;
	int ret;

	/* as fabtests: device memory the host never touches (shm then moves
	 * it with CUDA IPC copies, not through host bounce buffers) */
	if (opt.cuda) {
		attr.device.cuda = opt.cuda_dev;
		flags = FI_HMEM_DEVICE_ONLY;
	}
	ret = fi_mr_regattr(domain, &attr, flags, &mr);
	if (ret)
		FI_ERR("fi_mr_regattr", ret);
	return ret;
}

static int init_fabric(void)
{
	struct fi_info *hints;
	struct fi_cq_attr cq_attr = { 0 };
	struct fi_av_attr av_attr = { 0 };
	const char *node = NULL;
	uint64_t flags = 0;
	int ret;

	hints = fi_allocinfo();
	if (!hints)
		return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (opt.op == OP_TSEND)
		hints->caps |= FI_TAGGED;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	if (opt.cuda) {
		hints->caps |= FI_HMEM;
		hints->domain_attr->mr_mode |= FI_MR_HMEM;
	}
	hints->domain_attr->av_type = FI_AV_UNSPEC;
	hints->domain_attr->threading = opt.threading;
	if (opt.prov)
		hints->fabric_attr->prov_name = strdup(opt.prov);
	if (opt.domain)
		hints->domain_attr->name = strdup(opt.domain);

	if (opt.src && !opt.src_oob_only) {
		node = opt.src;
		flags = FI_SOURCE;
	}
	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, NULL, flags,
			 hints, &fi);
	fi_freeinfo(hints);
	if (ret) {
		FI_ERR("fi_getinfo", ret);
		errmsg("(prov %s, FI_PROVIDER=%s, node %s)", opt.prov ? opt.prov : "(any)",
		       getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : "(unset)",
		       node ? node : "(none)");
		return ret;
	}
	mr_raw = !!(fi->domain_attr->mr_mode & FI_MR_RAW);
	if (!opt.quiet) {
		printf("# provider %s, fabric %s, domain %s, mr_mode %s\n",
		       fi->fabric_attr->prov_name, fi->fabric_attr->name, fi->domain_attr->name,
		       fi_tostr(&fi->domain_attr->mr_mode, FI_TYPE_MR_MODE));
		printf("# mr_key_size %zu, cq_data_size %zu, max_msg_size %zu\n",
		       fi->domain_attr->mr_key_size, fi->domain_attr->cq_data_size,
		       fi->ep_attr->max_msg_size);
	}

	ret = fi_fabric(fi->fabric_attr, &fabric, NULL);
	if (ret) {
		FI_ERR("fi_fabric", ret);
		return ret;
	}
	ret = fi_domain(fabric, fi, &domain, NULL);
	if (ret) {
		FI_ERR("fi_domain", ret);
		return ret;
	}
	cq_attr.format = FI_CQ_FORMAT_DATA;
	cq_attr.wait_obj = FI_WAIT_NONE;
	cq_attr.size = opt.window * 2 + 256;
	if (fi->tx_attr->size && cq_attr.size < fi->tx_attr->size)
		cq_attr.size = fi->tx_attr->size;
	ret = fi_cq_open(domain, &cq_attr, &cq, NULL);
	if (ret) {
		FI_ERR("fi_cq_open", ret);
		return ret;
	}
	av_attr.type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type
								 : FI_AV_TABLE;
	av_attr.count = 4;
	ret = fi_av_open(domain, &av_attr, &av, NULL);
	if (ret) {
		FI_ERR("fi_av_open", ret);
		return ret;
	}
	ret = fi_endpoint(domain, fi, &ep, NULL);
	if (ret) {
		FI_ERR("fi_endpoint", ret);
		return ret;
	}
	ret = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
	if (ret) {
		FI_ERR("fi_ep_bind(cq)", ret);
		return ret;
	}
	ret = fi_ep_bind(ep, &av->fid, 0);
	if (ret) {
		FI_ERR("fi_ep_bind(av)", ret);
		return ret;
	}
	ret = fi_enable(ep);
	if (ret) {
		FI_ERR("fi_enable", ret);
		return ret;
	}

	/* one buffer, used as RMA source/sink locally and as the remote target */
	if (buf_alloc(buf_size)) {
		errmsg("cannot allocate %zu bytes%s", buf_size, opt.cuda ? " on the GPU" : "");
		return -FI_ENOMEM;
	}
	ret = register_buf();
	if (ret)
		return ret;
	if (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &ep->fid, 0);
		if (ret) {
			FI_ERR("fi_mr_bind", ret);
			return ret;
		}
		ret = fi_mr_enable(mr);
		if (ret) {
			FI_ERR("fi_mr_enable", ret);
			return ret;
		}
	}
	mr_desc = fi_mr_desc(mr);

	if (fi->domain_attr->cq_data_size >= 8)
		cq_data_mask = ~0ULL;
	else
		cq_data_mask = (1ULL << (8 * fi->domain_attr->cq_data_size)) - 1;
	return 0;
}

/* exchange endpoint names and the registered buffer */
static int exchange(void)
{
	char namebuf[256], *name = namebuf;
	size_t namelen = sizeof(namebuf);
	void *peer_name = NULL, *peer_key = NULL;
	uint32_t peer_namelen, peer_keylen;
	uint64_t hdr[3], base = 0, mykey;
	uint8_t rawbuf[256], *rawkey = rawbuf;
	size_t rawlen = 0;
	int ret;

	ret = fi_getname(&ep->fid, name, &namelen);
	if (ret == -FI_ETOOSMALL && namelen > sizeof(namebuf) && namelen < (1U << 20)) {
		name = malloc(namelen);
		if (!name)
			return -FI_ENOMEM;
		ret = fi_getname(&ep->fid, name, &namelen);
	}
	if (ret) {
		FI_ERR("fi_getname", ret);
		goto err;
	}
	if (send_blob(name, (uint32_t)namelen) || recv_blob(&peer_name, &peer_namelen)) {
		ret = -1;
		goto err;
	}
	if (name != namebuf)
		free(name);
	name = NULL;
	ret = fi_av_insert(av, peer_name, 1, &peer, 0, NULL);
	free(peer_name);
	if (ret != 1) {
		FI_ERR("fi_av_insert", ret < 0 ? ret : -FI_EINVAL);
		return -1;
	}

	/* our buffer: {VA, len, 64-bit key} + raw key bytes when FI_MR_RAW */
	if (mr_raw) {
		rawlen = sizeof(rawbuf);
		ret = fi_mr_raw_attr(mr, &base, rawkey, &rawlen, 0);
		if (ret == -FI_ETOOSMALL && rawlen > sizeof(rawbuf) && rawlen < (1U << 20)) {
			rawkey = malloc(rawlen);
			if (!rawkey)
				return -FI_ENOMEM;
			ret = fi_mr_raw_attr(mr, &base, rawkey, &rawlen, 0);
		}
		if (ret) {
			FI_ERR("fi_mr_raw_attr", ret);
			goto err;
		}
		mykey = 0;
	} else {
		mykey = fi_mr_key(mr);
		if (mykey == FI_KEY_NOTAVAIL) {
			errmsg("fi_mr_key: key not available (and no FI_MR_RAW)");
			return -1;
		}
	}
	hdr[0] = htobe64((uint64_t)(uintptr_t)buf);
	hdr[1] = htobe64(buf_size);
	hdr[2] = htobe64(mykey);
	if (send_blob(hdr, sizeof(hdr))) {
		ret = -1;
		goto err;
	}
	hdr[0] = htobe64(base);
	ret = send_blob(hdr, sizeof(hdr[0])) || send_blob(rawkey, (uint32_t)rawlen) ? -1 : 0;
	if (rawkey != rawbuf)
		free(rawkey);
	rawkey = NULL;
	if (ret)
		return -1;

	/* the peer's */
	void *ph, *pb;
	uint32_t phlen, pblen;
	if (recv_blob(&ph, &phlen))
		return -1;
	if (phlen != sizeof(hdr)) {
		errmsg("oob: bad buffer descriptor");
		free(ph);
		return -1;
	}
	memcpy(hdr, ph, sizeof(hdr));
	free(ph);
	if (recv_blob(&pb, &pblen))
		return -1;
	if (pblen != sizeof(uint64_t)) {
		errmsg("oob: bad raw base");
		free(pb);
		return -1;
	}
	memcpy(&base, pb, sizeof(base));
	free(pb);
	base = be64toh(base);
	if (recv_blob(&peer_key, &peer_keylen))
		return -1;

	uint64_t peer_va = be64toh(hdr[0]), peer_len = be64toh(hdr[1]);
	if (is_client() && peer_len < buf_size) {
		errmsg("peer buffer (%" PRIu64 ") smaller than ours (%zu): size lists differ?",
		       peer_len, buf_size);
		free(peer_key);
		return -1;
	}
	rbuf_addr = (fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? peer_va : 0;
	if (mr_raw) {
		ret = fi_mr_map_raw(domain, base, peer_key, peer_keylen, &rkey, 0);
		if (ret) {
			FI_ERR("fi_mr_map_raw", ret);
			free(peer_key);
			return ret;
		}
		remote_key_mapped = true;
	} else {
		rkey = be64toh(hdr[2]);
	}
	free(peer_key);
	return 0;
err:
	if (name && name != namebuf)
		free(name);
	if (rawkey && rawkey != rawbuf)
		free(rawkey);
	return ret ? ret : -1;
}

/* the client tells the server the op, verification and the buffer size */
static int hello(void)
{
	struct oob_msg m;

	if (is_client())
		return send_msg(OOB_HELLO, opt.op | (opt.verify ? HELLO_VERIFY : 0) |
				(opt.cuda ? HELLO_SYNC : 0), buf_size, 0, 0);
	if (sock_recv(&m, sizeof(m), opt.max_secs))
		return -1;
	msg_decode(&m);
	if (m.type != OOB_HELLO || (m.status & 0xff) > OP_TSEND || !m.size ||
	    m.size > (16ULL << 30)) {
		errmsg("protocol error: bad hello from the client");
		return -1;
	}
	opt.op = (enum op_type)(m.status & 0xff);
	opt.verify = !!(m.status & HELLO_VERIFY);
	opt.sync_target = !!(m.status & HELLO_SYNC);
	if (m.size > buf_size)
		buf_size = m.size;
	return 0;
}

/* Per-rail traffic, when the provider is multirail (its fi_open_ops). */
static void print_rail_stats(void)
{
	struct fi_multirail_ep_ops *ops;
	struct fi_multirail_rail_stats st;
	struct fi_multirail_ep_stats es;
	int r, n;

	if (opt.quiet || !ep ||
	    fi_open_ops(&ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **)&ops, NULL))
		return;
	n = ops->rail_count(ep);
	for (r = 0; r < n; r++) {
		if (ops->rail_stats(ep, r, &st))
			continue;
		printf("# rail %d %-12s %10" PRIu64 " chunks %14" PRIu64
		       " bytes posted %14" PRIu64 " completed %" PRIu64 " errors\n",
		       r, st.domain, st.tx_ops, st.tx_bytes, st.bytes_completed, st.errors);
	}
	if (ops->size >= offsetof(struct fi_multirail_ep_ops, ep_stats) +
			 sizeof(ops->ep_stats) &&
	    !ops->ep_stats(ep, &es, sizeof(es)))
		printf("# RMA ops that took the general way (not the small "
		       "op's fast path): %" PRIu64 "\n", es.rma_general);
}

static void cleanup(void)
{
	if (remote_key_mapped)
		fi_mr_unmap_key(domain, rkey);
	if (mr)
		fi_close(&mr->fid);
	if (ep)
		fi_close(&ep->fid);
	if (av)
		fi_close(&av->fid);
	if (cq)
		fi_close(&cq->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	if (fi)
		fi_freeinfo(fi);
	if (sock >= 0)
		close(sock);
	buf_free();
	free(ctxs);
	free(free_slots);
	free(seen);
}

/* ------------------------------------------------------------------ */
/* initiator                                                            */

static ssize_t post_one(size_t size, struct fi_context2 *ctx)
{
	switch (opt.op) {
	case OP_WRITE:
		return fi_write(ep, buf, size, mr_desc, peer, rbuf_addr, rkey, ctx);
	case OP_WRITEDATA:
		return fi_writedata(ep, buf, size, mr_desc, global_seq & cq_data_mask, peer,
				    rbuf_addr, rkey, ctx);
	case OP_READ:
		return fi_read(ep, buf, size, mr_desc, peer, rbuf_addr, rkey, ctx);
	case OP_TSEND:
		return fi_tsend(ep, buf, size, mr_desc, peer, TSEND_TAG, ctx);
	}
	return -FI_EINVAL;
}

/*
 * Issue count ops of size bytes, at most opt.window in flight; stop posting
 * at stop_at (time bound).  Returns ops issued and completed, or < 0.
 */
static long run_ops(size_t size, size_t count, double stop_at, double hard_deadline)
{
	size_t posted = 0, slot;
	unsigned spins = 0;
	ssize_t ret;
	double t_start = now();

	while (posted < count) {
		if (nfree && now() < stop_at) {
			slot = free_slots[nfree - 1];
			ret = post_one(size, &ctxs[slot]);
			if (ret == 0) {
				nfree--;
				outstanding++;
				posted++;
				global_seq++;
				continue;
			}
			if (ret != -FI_EAGAIN) {
				FI_ERR(op_names[opt.op], ret);
				return ret;
			}
		} else if (now() >= stop_at) {
			break;
		}
		ret = progress();
		if (ret < 0)
			return ret;
		if (ret == 0 && (++spins & 255) == 0 && now() > hard_deadline) {
			errmsg("timed out posting (%zu posted, %zu outstanding)", posted, outstanding);
			return -FI_ETIMEDOUT;
		}
	}
	/* drain */
	while (outstanding) {
		ret = progress();
		if (ret < 0)
			return ret;
		if (ret == 0 && (++spins & 255) == 0) {
			if (now() > hard_deadline) {
				double el = now() - t_start;
				errmsg("timed out waiting for %zu completions (size %zu: %zu of %zu "
				       "completed in %.1f s, %.3f MB/s)", outstanding, size,
				       posted - outstanding, posted, el,
				       (double)size * (posted - outstanding) / el / 1e6);
				return -FI_ETIMEDOUT;
			}
			if ((spins & 4095) == 0)
				sched_yield();
		}
	}
	return (long)posted;
}

/*
 * The timed phase alone.  Not inlined: fi_multirail_insns counts this
 * function's instructions (callgrind --toggle-collect), so that the
 * connections and buffers the warm-up set up, whose cost follows the
 * processes' timing, stay out of the per-op figure.
 */
static __attribute__((noinline)) long timed_ops(size_t size, size_t iters, double t0)
{
	return run_ops(size, iters, t0 + opt.max_secs, t0 + 2 * opt.max_secs);
}

/* Most warm-up ops of one size: what the target must be ready to see. */
#define WARMUP_MAX_OPS	1000000

static size_t warmup_cap(void)
{
	if (!opt.warmup || opt.warmup_secs <= 0)
		return opt.warmup;
	return opt.warmup > WARMUP_MAX_OPS ? opt.warmup : WARMUP_MAX_OPS;
}

/*
 * -w ops, then, with -U, more rounds of ops until -U seconds have passed:
 * a provider's first contact with a peer (connections, buffer setup: tens
 * of ms per rail with tcp;ofi_rxm) then stays out of the timed phase, for
 * every system alike.  Returns the ops done, at most cap, or < 0.
 */
static long warm_up(size_t size, size_t cap)
{
	double start = now();
	size_t round = opt.warmup > opt.window ? opt.warmup : opt.window;
	long done = 0, n;

	if (!cap)
		return 0;
	do {
		size_t want = (size_t) done < opt.warmup ? opt.warmup - done : round;

		if (want > cap - (size_t) done)
			want = cap - (size_t) done;
		n = run_ops(size, want, start + opt.max_secs, start + 2 * opt.max_secs);
		if (n < 0)
			return n;
		done += n;
	} while ((size_t) done < cap && now() - start < opt.warmup_secs &&
		 now() - start < opt.max_secs);
	return done;
}

static size_t auto_iters(size_t size)
{
	size_t n = DEFAULT_BYTES / size;

	if (n < MIN_ITERS)
		n = MIN_ITERS;
	if (n > MAX_DEF_ITERS)
		n = MAX_DEF_ITERS;
	return n;
}

static void size_str(size_t size, char *s, size_t len)
{
	if (size >= (1UL << 30) && !(size % (1UL << 30)))
		snprintf(s, len, "%zug", size >> 30);
	else if (size >= (1UL << 20) && !(size % (1UL << 20)))
		snprintf(s, len, "%zum", size >> 20);
	else if (size >= (1UL << 10) && !(size % (1UL << 10)))
		snprintf(s, len, "%zuk", size >> 10);
	else
		snprintf(s, len, "%zu", size);
}

static void csv_row(size_t size, size_t iters, double secs, double mbps, double gbps)
{
	FILE *f;
	long pos;

	if (!opt.csv)
		return;
	f = fopen(opt.csv, "a");
	if (!f) {
		errmsg("cannot open %s: %s", opt.csv, strerror(errno));
		return;
	}
	fseek(f, 0, SEEK_END);
	pos = ftell(f);
	if (pos == 0)
		fprintf(f, "label,op,size,iters,seconds,MBps,Gbps\n");
	fprintf(f, "%s,%s,%zu,%zu,%.6f,%.2f,%.4f\n", opt.label ? opt.label : "mrl_bw",
		op_names[opt.op], size, iters, secs, mbps, gbps);
	fclose(f);
}

/*
 * -E: polls of the initiator's CQ after the run, nothing in flight; all
 * must be empty.
 * Not inlined: fi_multirail_insns counts this function's instructions alone.
 */
static __attribute__((noinline)) int empty_polls(void)
{
	struct fi_cq_data_entry comp[CQ_BATCH];
	size_t i, found = 0;
	ssize_t ret;

	for (i = 0; i < opt.empty_polls; i++) {
		ret = fi_cq_read(cq, comp, CQ_BATCH);
		if (ret != -FI_EAGAIN)
			found++;
	}
	if (found) {
		errmsg("%zu of %zu empty polls found something", found, opt.empty_polls);
		return -1;
	}
	return 0;
}

/* The wall time per empty poll, outside what fi_multirail_insns counts. */
static int timed_empty_polls(void)
{
	double start = now();
	int ret = empty_polls();

	if (!ret && !opt.quiet)
		printf("# %zu empty polls, %.1f ns each\n", opt.empty_polls,
		       (now() - start) * 1e9 / opt.empty_polls);
	return ret;
}

static int run_client(void)
{
	struct oob_msg m;
	int i, fails = 0;
	bool polls_failed;
	long done, wdone;
	size_t size, iters, warmup;
	double t0, t1, secs, mbps;
	char ss[32], ts[32];

	printf("%-10s %-8s %-8s %-10s %-10s %-10s%s\n", "bytes", "iters", "total", "time",
	       "MB/sec", "Gbit/s", opt.verify ? "  verify" : "");
	fflush(stdout);

	for (i = 0; i < opt.nsizes; i++) {
		size = opt.sizes[i];
		iters = opt.iters ? opt.iters : auto_iters(size);
		warmup = warmup_cap();

		if (opt.verify) {
			if (opt.op == OP_READ)
				buf_poison(size);
			else
				buf_fill(size);
		}
		if (send_msg(OOB_BEGIN, (uint32_t)warmup, size, iters, global_seq) ||
		    expect_msg(&m, OOB_READY, opt.max_secs))
			return -1;
		if (m.status) {
			errmsg("server refused size %zu", size);
			return -1;
		}

		wdone = warm_up(size, warmup);
		if (wdone < 0)
			return -1;
		t0 = now();
		done = timed_ops(size, iters, t0);
		if (done < 0 || device_sync())
			return -1;
		t1 = now();

		if (send_msg(OOB_DONE, 0, size, (uint64_t)(done + wdone), 0))
			return -1;
		/* GPU memory: the bytes are placed once the target's device is
		 * synchronised too, so that is when the clock stops */
		if (opt.cuda) {
			if (expect_msg(&m, OOB_SYNCED, 3 * opt.max_secs))
				return -1;
			t1 = now();
		}
		if (expect_msg(&m, OOB_ACK, 3 * opt.max_secs))
			return -1;
		const char *vres = "";
		if (opt.verify) {
			vres = "  ok";
			if (m.status) {
				vres = "  FAILED(target)";
				fails++;
			}
			if (opt.op == OP_READ) {
				long bad = buf_check(size);
				if (bad >= 0) {
					errmsg("read verification failed: size %zu, first bad byte at %ld",
					       size, bad);
					vres = "  FAILED";
					fails++;
				}
			}
		} else if (m.status) {
			vres = "  FAILED(target)";
			fails++;
		}

		secs = t1 - t0;
		if (secs <= 0)
			secs = 1e-9;
		mbps = (double)size * done / secs / 1e6;
		size_str(size, ss, sizeof(ss));
		size_str(size * done, ts, sizeof(ts));
		printf("%-10s %-8ld %-8s %-10.3f %-10.2f %-10.3f%s%s\n", ss, done, ts, secs, mbps,
		       mbps * 8 / 1000, vres, (size_t)done < iters ? "  (time-bounded)" : "");
		fflush(stdout);
		csv_row(size, (size_t)done, secs, mbps, mbps * 8 / 1000);
	}
	/* before FIN: the target stays up, so the rails' connections do too */
	polls_failed = opt.empty_polls && timed_empty_polls();
	send_msg(OOB_FIN, 0, 0, 0, 0);
	if (polls_failed)
		return -1;
	if (fails) {
		errmsg("%d verification failure(s)", fails);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* target                                                               */

static int target_verify(size_t size)
{
	long bad = -1;
	double deadline = now() + (opt.max_secs < 5 ? opt.max_secs : 5);
	int tries;

	/*
	 * The initiator's completion may precede placement at the target
	 * (e.g. inject/transmit complete): keep progressing and re-check,
	 * bounded.
	 */
	for (tries = 0; tries < 200; tries++) {
		bad = buf_check(size);
		if (bad < 0)
			return 0;
		if (now() > deadline)
			break;
		for (int k = 0; k < 1000; k++)
			if (progress() < 0)
				return -1;
		usleep(1000);
	}
	errmsg("%s verification failed: size %zu, first bad byte at %ld", op_names[opt.op], size,
	       bad);
	return -1;
}

static int run_server(void)
{
	struct oob_msg m;
	size_t total, cap, nverified = 0;
	uint32_t status;
	int fails = 0;

	for (;;) {
		/* between sizes the client may take a while (verification) */
		if (wait_msg(&m, 4 * opt.max_secs + 30))
			return -1;
		if (m.type == OOB_FIN)
			break;
		if (m.type != OOB_BEGIN) {
			errmsg("protocol error: message %u", m.type);
			return -1;
		}
		if (m.size > buf_size) {
			errmsg("size %" PRIu64 " exceeds buffer", m.size);
			send_msg(OOB_READY, 1, m.size, 0, 0);
			return -1;
		}
		if (opt.verify) {
			if (opt.op == OP_READ)
				buf_fill(m.size);
			else
				buf_poison(m.size);
		}
		if (opt.op == OP_TSEND && !recvs_posted) {
			for (size_t k = 0; k < TSEND_RECVS; k++) {
				ssize_t r = post_recv(&rctxs[k]);

				if (r) {
					FI_ERR("fi_trecv", r);
					return -1;
				}
			}
			recvs_posted = true;
		}
		tsend_received = 0;
		if (opt.op == OP_WRITEDATA) {
			cap = m.count + m.status;	/* iters + warmup */
			free(seen);
			seen = calloc(cap / 8 + 1, 1);
			if (!seen)
				return -1;
			seen_cap = cap;
			seen_count = 0;
			seen_bad = 0;
			seen_base = m.seq & cq_data_mask;
		}
		if (send_msg(OOB_READY, 0, m.size, 0, 0))
			return -1;

		if (expect_msg(&m, OOB_DONE, 3 * opt.max_secs + 30))
			return -1;
		status = 0;
		if (opt.op == OP_WRITEDATA) {
			total = m.count;
			double deadline = now() + opt.max_secs;
			unsigned spins = 0;
			while (seen_count + seen_bad < total) {
				int r = progress();
				if (r < 0)
					return -1;
				if (r == 0 && (++spins & 255) == 0 && now() > deadline)
					break;
			}
			if (seen_count != total || seen_bad) {
				errmsg("writedata: size %" PRIu64 ": %zu of %zu remote completions "
				       "with expected data, %zu unexpected",
				       m.size, seen_count, total, seen_bad);
				status = 1;
			}
		}
		if (opt.op == OP_TSEND) {
			double deadline = now() + opt.max_secs;
			unsigned spins = 0;

			while (tsend_received < m.count) {
				int r = progress();

				if (r < 0)
					return -1;
				if (r == 0 && (++spins & 255) == 0 && now() > deadline)
					break;
			}
			if (tsend_received != m.count) {
				errmsg("tsend: size %" PRIu64 ": %zu of %" PRIu64 " messages "
				       "received", m.size, tsend_received, m.count);
				status = 1;
			}
		}
		if (opt.sync_target &&
		    (device_sync() || send_msg(OOB_SYNCED, 0, m.size, 0, 0)))
			return -1;
		if (!status && opt.verify && opt.op != OP_READ && target_verify(m.size))
			status = 2;
		if (status)
			fails++;
		else
			nverified++;
		if (send_msg(OOB_ACK, status, m.size, 0, 0))
			return -1;
	}
	if (!opt.quiet)
		printf("# target: %zu size(s) ok%s, %d failed\n", nverified,
		       opt.verify ? " (verified)" : "", fails);
	return fails ? -1 : 0;
}

/* ------------------------------------------------------------------ */

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end == 'b' || *end == 'B' || *end == 'i')
		end++;
	if (end == s || *end || v == 0)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

static int parse_sizes(const char *arg)
{
	char *copy = strdup(arg), *tok, *save = NULL;
	size_t s;
	int i, j;

	opt.nsizes = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "all")) {
			for (s = 1; s <= MAX_ALL_SIZE && opt.nsizes < MAX_SIZES; s <<= 1)
				opt.sizes[opt.nsizes++] = s;
			continue;
		}
		if (parse_size(tok, &s) || opt.nsizes >= MAX_SIZES) {
			fprintf(stderr, "bad size '%s'\n", tok);
			free(copy);
			return -1;
		}
		opt.sizes[opt.nsizes++] = s;
	}
	free(copy);
	qsort(opt.sizes, opt.nsizes, sizeof(size_t), cmp_size);
	for (i = 0, j = 0; i < opt.nsizes; i++)	/* unique */
		if (!j || opt.sizes[j - 1] != opt.sizes[i])
			opt.sizes[j++] = opt.sizes[i];
	opt.nsizes = j;
	return opt.nsizes ? 0 : -1;
}

static int parse_threading(const char *s)
{
	static const struct {
		const char *name;
		enum fi_threading level;
	} levels[] = {
		{ "domain", FI_THREAD_DOMAIN }, { "completion", FI_THREAD_COMPLETION },
		{ "endpoint", FI_THREAD_ENDPOINT }, { "safe", FI_THREAD_SAFE },
	};
	size_t i;

	for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		if (!strcmp(s, levels[i].name)) {
			opt.threading = levels[i].level;
			return 0;
		}
	}
	fprintf(stderr, "bad -t '%s': domain, completion, endpoint or safe\n", s);
	return -1;
}

/* -M: this process's resident memory now (VmRSS, KiB), with a label. */
static void print_memory(const char *stage)
{
	char line[256];
	FILE *f;

	if (!opt.memory)
		return;
	f = fopen("/proc/self/status", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			printf("# memory %-14s %s", stage, line + 6);
	fclose(f);
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [options] [server_addr]\n"
		"  RMA bandwidth over one FI_EP_RDM endpoint; the client initiates.\n"
		"  -p PROV       provider (hints prov_name); default: FI_PROVIDER / any\n"
		"  -d DOMAIN     domain name\n"
		"  -s SRC        source address: binds the oob socket and, with FI_SOURCE,\n"
		"                is passed as node to fi_getinfo\n"
		"  -B            use -s for the oob socket only (not for fi_getinfo)\n"
		"  -P PORT       oob tcp port (default %u)\n"
		"  -o OP         write | writedata | read | tsend (a tagged send into\n"
		"                the target's posted receives; default write)\n"
		"  -S SIZES      'all' (1 B .. 64 MiB, powers of 2) and/or list: 4k,1M,...\n"
		"                (default 4M)\n"
		"  -W N          window: operations in flight (default 64)\n"
		"  -I N          timed iterations per size (default ~256 MiB per size,\n"
		"                %lu..%lu)\n"
		"  -w N          warmup operations per size (default 10)\n"
		"  -U SECS       and keep warming up until SECS have passed (default 0)\n"
		"  -v            verify data (target checks after each size; read: initiator)\n"
		"  -c FILE       append CSV rows label,op,size,iters,seconds,MBps,Gbps\n"
		"  -L LABEL      label for the CSV rows\n"
		"  -T SECS       time bound per size and per wait (default 60)\n"
		"  -D cuda       the buffer in GPU memory (CUDA, loaded at run time); the\n"
		"                clock stops once both sides synchronised the device\n"
		"  -i N          the CUDA device (default 0)\n"
		"  -t LEVEL      threading hint: domain, completion, endpoint or safe\n"
		"                (default: the provider's choice)\n"
		"  -M            print resident memory (VmRSS) after each stage: start,\n"
		"                endpoint enabled, peer inserted, the run\n"
		"  -E N          after the run the initiator polls its empty CQ N times,\n"
		"                the target still up and every rail connected, and prints\n"
		"                the time per poll (fi_multirail_insns counts them)\n"
		"  -q            quiet: no '#' info lines\n",
		prog, DEFAULT_PORT, MIN_ITERS, MAX_DEF_ITERS);
}

int main(int argc, char **argv)
{
	int c, ret;
	size_t i;

	signal(SIGPIPE, SIG_IGN);
	opt.sizes[0] = 4UL << 20;
	opt.nsizes = 1;

	while ((c = getopt(argc, argv, "p:d:s:BP:o:S:W:I:w:U:vc:L:T:qD:i:t:E:Mh")) != -1) {
		switch (c) {
		case 'p': opt.prov = optarg; break;
		case 'd': opt.domain = optarg; break;
		case 's': opt.src = optarg; break;
		case 'B': opt.src_oob_only = true; break;
		case 'P': opt.port = (uint16_t)atoi(optarg); break;
		case 'o':
			if (!strcmp(optarg, "write"))
				opt.op = OP_WRITE;
			else if (!strcmp(optarg, "writedata"))
				opt.op = OP_WRITEDATA;
			else if (!strcmp(optarg, "read"))
				opt.op = OP_READ;
			else if (!strcmp(optarg, "tsend"))
				opt.op = OP_TSEND;
			else {
				usage(argv[0]);
				return 1;
			}
			break;
		case 'S':
			if (parse_sizes(optarg))
				return 1;
			break;
		case 'W': opt.window = strtoul(optarg, NULL, 0); break;
		case 'I': opt.iters = strtoul(optarg, NULL, 0); break;
		case 'w': opt.warmup = strtoul(optarg, NULL, 0); break;
		case 'U': opt.warmup_secs = atof(optarg); break;
		case 'v': opt.verify = true; break;
		case 'c': opt.csv = optarg; break;
		case 'L': opt.label = optarg; break;
		case 'T': opt.max_secs = atof(optarg); break;
		case 'q': opt.quiet = true; break;
		case 'D':
			if (strcmp(optarg, "cuda")) {
				fprintf(stderr, "-D: only cuda\n");
				return 1;
			}
			opt.cuda = true;
			break;
		case 'i': opt.cuda_dev = atoi(optarg); break;
		case 't':
			if (parse_threading(optarg))
				return 1;
			break;
		case 'E': opt.empty_polls = strtoul(optarg, NULL, 0); break;
		case 'M': opt.memory = true; break;
		default:
			usage(argv[0]);
			return c == 'h' ? 0 : 1;
		}
	}
	if (optind < argc)
		opt.dst = argv[optind];
	if (opt.window < 1 || opt.window > MAX_WINDOW || opt.max_secs <= 0 || !opt.port) {
		fprintf(stderr, "bad -W (1..%d), -T or -P\n", MAX_WINDOW);
		return 1;
	}

	buf_size = 0;
	for (i = 0; i < (size_t)opt.nsizes; i++)
		if (opt.sizes[i] > buf_size)
			buf_size = opt.sizes[i];

	ctxs = calloc(opt.window, sizeof(*ctxs));
	free_slots = calloc(opt.window, sizeof(*free_slots));
	if (!ctxs || !free_slots)
		return 1;
	for (i = 0; i < opt.window; i++)
		free_slots[i] = opt.window - 1 - i;
	nfree = opt.window;

	if (opt.cuda && cuda_load())
		return 1;
	/* oob first: a server without a client fails fast, and fi_getinfo errors
	 * are reported on both sides (the peer sees the connection close). */
	print_memory("start");
	ret = oob_connect();
	if (!ret)
		ret = hello();
	if (!ret)
		ret = init_fabric();
	if (!ret)
		print_memory("enabled");
	if (!ret) {
		for (i = 0; i < (size_t)opt.nsizes; i++) {
			if (opt.sizes[i] > fi->ep_attr->max_msg_size) {
				errmsg("size %zu exceeds max_msg_size %zu", opt.sizes[i],
				       fi->ep_attr->max_msg_size);
				ret = -1;
			}
		}
		if (opt.op == OP_WRITEDATA && !fi->domain_attr->cq_data_size) {
			errmsg("writedata: provider has cq_data_size 0");
			ret = -1;
		}
	}
	if (!ret)
		ret = exchange();
	if (!ret)
		print_memory("peer inserted");
	if (!ret) {
		if (!opt.quiet && is_client())
			printf("# initiator: op %s, window %zu, warmup %zu ops and %.1f s, "
			       "%d size(s)%s\n", op_names[opt.op], opt.window, opt.warmup,
			       opt.warmup_secs, opt.nsizes,
			       opt.verify ? ", verify" : "");
		else if (!opt.quiet)
			printf("# target: op %s (set by the initiator)%s\n", op_names[opt.op],
			       opt.verify ? ", verify" : "");
		fflush(stdout);
		ret = is_client() ? run_client() : run_server();
		print_memory("after the run");
	}
	if (other_events && !opt.quiet)
		printf("# %zu unexpected completion(s) ignored\n", other_events);
	if (!ret && is_client())
		print_rail_stats();
	cleanup();
	return ret ? 1 : 0;
}
