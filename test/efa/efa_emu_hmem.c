/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * efa_emu device memory.  efa with GPUDirect reads and writes GPU memory
 * from the NIC; tcp cannot touch it, so here an RMA with device memory on
 * either side is carried by messages between the two emulated endpoints,
 * through host bounce buffers, CUDA (loaded with dlopen) copying at each end:
 *   PUT  initiator -> target: a header (injected), then the payload with a
 *        tag of its own; the target copies it into place, raises the CQ
 *        data, then answers ACK.  The write completes at the ACK: its bytes
 *        are placed, as an SRD write's are at its completion.
 *   GET  initiator -> target: a header; the target copies the bytes out and
 *        answers ACK, then the payload; the read completes once the payload
 *        is copied into place.
 * A registration of device memory has a key with EMU_KEY_DEVICE set, so the
 * initiator knows which protocol a target needs.  The target answers the
 * fi_addr its core reports as the sender (FI_SOURCE): it must have the
 * initiator in its AV.  Like efa's emulated RMA (its `efa` fabric), this
 * needs the target's progress; here efa-direct's device RMA does too.
 * Messages in device memory go through a bounce buffer the same way.
 *
 * A header's tag names the endpoint it is for (a hash of its core
 * address), and each endpoint's header receives take only its own.  The
 * receives are posted for any sender, and libfabric 2.x's tcp matches
 * such a receive against the messages buffered for every endpoint of the
 * domain, not only its own: with one tag for all, an endpoint took
 * headers and ACKs sent to its neighbours, and those RMAs never finished.
 *
 * FI_EFA_EMU_HMEM: auto (FI_HMEM where CUDA finds a device), off, or all:
 * every RMA takes this path, host memory too (memcpy), which tests the
 * protocol on machines without a GPU.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "efa_emu.h"

#define EMU_TAG_PAYLOAD	(EMU_TAG_INTERNAL | (1ULL << 61))
#define EMU_HDR_HASH	((1ULL << 61) - 1)	/* a header's tag: the rest */
#define EMU_ID_MASK	((1ULL << 48) - 1)
#define EMU_WIRE_MAGIC	0x65667768u	/* "efwh" */
#define EMU_WIRE_DATA	0x1		/* a PUT with CQ data */
#define EMU_HDR_RX	8		/* header receives per endpoint */

enum { EMU_PUT = 1, EMU_GET, EMU_ACK };

struct emu_wire {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	int32_t status;			/* ACK: 0 or a positive FI_E* */
	uint32_t data;			/* PUT: the CQ data (efa's 4 bytes) */
	uint64_t id;			/* the initiator's: payload tag, ACK */
	uint64_t key, addr, len;
};

/* A posted header receive. */
struct emu_hdr_rx {
	struct emu_req req;
	struct emu_wire w;
};

/* A host copy of a buffer, with the core's registration where it needs one. */
struct emu_bounce {
	char *buf;
	size_t len;
	struct fid_mr *mr;
	struct iovec iov[EMU_RDM_IOV_LIMIT];	/* the user's, to scatter into */
	size_t count;
};

enum emu_step {
	STEP_PAYLOAD_RX = 0x1,		/* post the payload's receive */
	STEP_HEADER = 0x2,		/* inject the PUT/GET header */
	STEP_PAYLOAD_TX = 0x4,		/* send the payload */
	STEP_ACK = 0x8,			/* inject the ACK */
};

/* One staged RMA, at the initiator or at the target. */
struct emu_xfer {
	struct emu_ep *ep;
	bool target;
	bool write;
	fi_addr_t peer;
	uint64_t peer_tag;		/* its headers' tag */
	struct emu_wire w;		/* initiator: the header; target: as received */
	struct emu_req *user;		/* initiator: the user's op, or NULL */
	struct emu_bounce *b;
	struct emu_req data;		/* the payload's core operation */
	unsigned int steps;		/* still to post, in enum order */
	int waits;			/* payload and ACK not yet seen */
	int err;			/* positive FI_E* */
	struct emu_xfer *next;
};

static struct {
	void *lib;
	int (*memcpy)(void *, const void *, size_t, int);
	int (*device_count)(int *);
	int (*pointer_attributes)(void *, const void *);
	int ndev;
} cuda;

static enum { HMEM_AUTO, HMEM_OFF, HMEM_ALL } hmem_mode;

#define CUDA_MEMCPY_DEFAULT	4	/* cudaMemcpyDefault: by the pointers */
#define CUDA_MEMORY_DEVICE	2	/* cudaMemoryTypeDevice */

void emu_hmem_init(void)
{
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"libcudart.so.11.0",
	};
	char *mode = NULL;
	size_t i;

	fi_param_define(&emu_prov, "emu_hmem", FI_PARAM_STRING,
			"Device memory: auto (FI_HMEM where CUDA finds a GPU, "
			"carried through host copies), off, or all (every RMA "
			"through that path, host memory too: tests it without "
			"a GPU)");
	fi_param_get_str(&emu_prov, "emu_hmem", &mode);
	hmem_mode = !mode || !strcmp(mode, "auto") ? HMEM_AUTO :
		    !strcmp(mode, "all") ? HMEM_ALL : HMEM_OFF;
	if (mode && hmem_mode == HMEM_OFF && strcmp(mode, "off"))
		EMU_WARN(FI_LOG_CORE, "FI_EFA_EMU_HMEM=%s: auto, off or all; "
			 "off\n", mode);
	if (hmem_mode == HMEM_OFF)
		return;
	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !cuda.lib; i++)
		cuda.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!cuda.lib)
		return;
	*(void **) &cuda.memcpy = dlsym(cuda.lib, "cudaMemcpy");
	*(void **) &cuda.device_count = dlsym(cuda.lib, "cudaGetDeviceCount");
	*(void **) &cuda.pointer_attributes =
		dlsym(cuda.lib, "cudaPointerGetAttributes");
	if (!cuda.memcpy || !cuda.device_count || !cuda.pointer_attributes ||
	    cuda.device_count(&cuda.ndev) || cuda.ndev <= 0) {
		dlclose(cuda.lib);
		memset(&cuda, 0, sizeof(cuda));
		return;
	}
	EMU_INFO(FI_LOG_CORE, "FI_HMEM: %d CUDA device(s), carried through "
		 "host copies\n", cuda.ndev);
}

void emu_hmem_fini(void)
{
	if (cuda.lib)
		dlclose(cuda.lib);
	memset(&cuda, 0, sizeof(cuda));
}

bool emu_hmem_offered(void)
{
	return hmem_mode != HMEM_OFF && cuda.ndev > 0;
}

/* Staged RMAs can happen: the header receives are posted, bit 62 is ours. */
bool emu_hmem_active(void)
{
	return hmem_mode == HMEM_ALL || emu_hmem_offered();
}

/* A buffer given without a descriptor (an inject): is it on a GPU? */
bool emu_hmem_is_device(const void *buf)
{
	struct { int type, device; void *dptr, *hptr; } attr;

	if (!cuda.ndev || !buf)
		return false;
	memset(&attr, 0, sizeof(attr));
	return !cuda.pointer_attributes(&attr, buf) &&
	       attr.type == CUDA_MEMORY_DEVICE;
}

/* Either side may be device memory: CUDA finds out from the pointers. */
static int copy(void *dst, const void *src, size_t len)
{
	if (!len)
		return 0;
	if (!cuda.ndev) {
		memcpy(dst, src, len);
		return 0;
	}
	if (cuda.memcpy(dst, src, len, CUDA_MEMCPY_DEFAULT)) {
		EMU_WARN(FI_LOG_EP_DATA, "cudaMemcpy of %zu bytes failed\n",
			 len);
		return -FI_EIO;
	}
	return 0;
}

/* A host copy of len bytes wherever they are, or NULL; the caller frees. */
void *emu_hmem_host_copy(const void *buf, size_t len)
{
	void *host = malloc(len ? len : 1);

	if (host && copy(host, buf, len)) {
		free(host);
		host = NULL;
	}
	return host;
}

static int gather(char *dst, const struct iovec *iov, size_t count)
{
	size_t i;
	int ret = 0;

	for (i = 0; i < count && !ret; i++) {
		ret = copy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
	return ret;
}

/* len bytes of src into iov, in order. */
static int scatter(const struct iovec *iov, size_t count, const char *src,
		   size_t len)
{
	size_t i, take;
	int ret = 0;

	for (i = 0; i < count && len && !ret; i++) {
		take = iov[i].iov_len < len ? iov[i].iov_len : len;
		ret = copy(iov[i].iov_base, src, take);
		src += take;
		len -= take;
	}
	return ret;
}

/* ---- bounce buffers ------------------------------------------------------- */

static void bounce_free(struct emu_bounce *b)
{
	if (!b)
		return;
	if (b->mr)
		fi_close(&b->mr->fid);
	free(b->buf);
	free(b);
}

static struct emu_bounce *bounce_new(struct emu_domain *dom, size_t len)
{
	struct emu_bounce *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->len = len;
	b->buf = malloc(len ? len : 1);
	if (!b->buf || emu_core_reg_local(dom, b->buf, len, FI_SEND | FI_RECV,
					  &b->mr)) {
		bounce_free(b);
		return NULL;
	}
	return b;
}

static void *bounce_desc(struct emu_bounce *b)
{
	return b->mr ? fi_mr_desc(b->mr) : NULL;
}

/* ---- messages in device memory --------------------------------------------- */

bool emu_hmem_msg_staged(struct emu_domain *dom, void **desc, size_t count)
{
	struct emu_mr *mr;
	size_t i;

	for (i = 0; desc && i < count; i++) {
		mr = emu_mr_of(dom, desc[i]);
		if (mr && mr->iface != FI_HMEM_SYSTEM)
			return true;
	}
	return false;
}

/*
 * The message goes from (or arrives in) one host buffer: *msg is pointed at
 * it.  A receive's bytes are scattered into the user's iovs at completion
 * (emu_hmem_req_done).
 */
int emu_hmem_msg_bounce(struct emu_ep *ep, bool tx, struct emu_req *req,
			struct fi_msg_tagged *msg, struct iovec *iov,
			void **desc, size_t len)
{
	struct emu_bounce *b = bounce_new(ep->domain, len);

	if (!b)
		return -FI_ENOMEM;
	if (tx && gather(b->buf, msg->msg_iov, msg->iov_count)) {
		bounce_free(b);
		return -FI_EIO;
	}
	if (!tx) {
		memcpy(b->iov, msg->msg_iov, msg->iov_count * sizeof(*iov));
		b->count = msg->iov_count;
	}
	iov->iov_base = b->buf;
	iov->iov_len = len;
	*desc = bounce_desc(b);
	msg->msg_iov = iov;
	msg->desc = desc;
	msg->iov_count = 1;
	req->bounce = b;
	return 0;
}

/* A user request with a bounce buffer completes: scatter, free. */
void emu_hmem_req_done(struct emu_req *req, const struct fi_cq_tagged_entry *e)
{
	struct emu_bounce *b = req->bounce;

	req->bounce = NULL;
	if (e && !req->err && b->count &&
	    scatter(b->iov, b->count, b->buf, e->len))
		req->err = FI_EIO;
	bounce_free(b);
}

/* ---- staged RMA ---------------------------------------------------------------- */

/* The header tag of the endpoint whose core address is addr (FNV-1a). */
static uint64_t hdr_tag_of(const void *addr, size_t len)
{
	const unsigned char *p = addr;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return EMU_TAG_INTERNAL | (h & EMU_HDR_HASH);
}

/* The header tag of the peer at addr in ep's AV, or 0 if unknown. */
static uint64_t peer_hdr_tag(struct emu_ep *ep, fi_addr_t addr)
{
	char name[EMU_NAME_MAX];
	size_t len = sizeof(name);

	if (!ep->av || fi_av_lookup(ep->av, addr, name, &len) ||
	    len > sizeof(name))
		return 0;
	return hdr_tag_of(name, len);
}

static void xfer_unlink(struct emu_xfer *x)
{
	struct emu_xfer **p;

	for (p = &x->ep->xfers; *p; p = &(*p)->next) {
		if (*p == x) {
			*p = x->next;
			return;
		}
	}
}

static void xfer_free(struct emu_xfer *x)
{
	xfer_unlink(x);
	bounce_free(x->b);
	free(x);
}

/* The initiator's op is over: the user's completion, with its error. */
static void initiator_done(struct emu_xfer *x)
{
	if (!x->err && !x->write && x->b &&
	    scatter(x->b->iov, x->b->count, x->b->buf, x->b->len))
		x->err = FI_EIO;
	if (x->user) {
		if (x->err && !x->user->err)
			x->user->err = x->err;
		emu_req_done(x->user, NULL, FI_ADDR_NOTAVAIL);
	}
	xfer_free(x);
}

/* Every step posted and nothing awaited: the xfer is over. */
static void xfer_settle(struct emu_xfer *x)
{
	if (x->steps || x->waits)
		return;
	if (x->target)
		xfer_free(x);
	else
		initiator_done(x);
}

static void data_done(struct emu_req *req, const struct fi_cq_tagged_entry *e,
		      fi_addr_t src, int err);

static ssize_t post_payload(struct emu_xfer *x, bool tx)
{
	struct emu_ep *ep = x->ep;
	uint64_t tag = EMU_TAG_PAYLOAD | (x->w.id & EMU_ID_MASK);

	x->data.done = data_done;
	x->data.ep = ep;
	if (tx)
		return fi_tsend(ep->core, x->b->buf, x->b->len,
				bounce_desc(x->b), x->peer, tag,
				&x->data.core_ctx);
	return fi_trecv(ep->core, x->b->buf, x->b->len, bounce_desc(x->b),
			x->peer, tag, 0, &x->data.core_ctx);
}

static ssize_t inject_wire(struct emu_xfer *x, uint16_t type)
{
	struct emu_wire w = x->w;

	w.magic = EMU_WIRE_MAGIC;
	w.type = type;
	w.status = x->err;
	return fi_tinject(x->ep->core, &w, sizeof(w), x->peer, x->peer_tag);
}

/*
 * Posts the steps still due, in order; -FI_EAGAIN leaves the rest for the
 * endpoint's next flush.  A step the core refuses otherwise fails the op.
 */
static int xfer_kick(struct emu_xfer *x)
{
	ssize_t ret = 0;

	if (x->steps & STEP_PAYLOAD_RX) {
		ret = post_payload(x, false);
		if (!ret)
			x->steps &= ~STEP_PAYLOAD_RX;
	}
	if (!ret && (x->steps & STEP_HEADER)) {
		ret = inject_wire(x, x->write ? EMU_PUT : EMU_GET);
		if (!ret)
			x->steps &= ~STEP_HEADER;
	}
	if (!ret && (x->steps & STEP_ACK)) {
		ret = inject_wire(x, EMU_ACK);
		if (!ret)
			x->steps &= ~STEP_ACK;
	}
	if (!ret && (x->steps & STEP_PAYLOAD_TX)) {
		ret = post_payload(x, true);
		if (!ret)
			x->steps &= ~STEP_PAYLOAD_TX;
	}
	if (ret == -FI_EAGAIN)
		return ret;
	if (ret) {
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: the core refused a "
			 "step: %s\n", fi_strerror((int) -ret));
		if (!x->err)
			x->err = FI_EIO;
		x->steps = 0;
		if (!x->target)
			x->waits = 0;	/* no answer will come */
	}
	xfer_settle(x);
	return 0;
}

void emu_hmem_flush(struct emu_ep *ep)
{
	struct emu_xfer *x, *next;

	for (x = ep->xfers; x; x = next) {
		next = x->next;
		if (x->steps && xfer_kick(x) == -FI_EAGAIN)
			return;	/* in order: later ones wait too */
	}
}

static struct emu_xfer *xfer_new(struct emu_ep *ep, bool target)
{
	struct emu_xfer *x = calloc(1, sizeof(*x)), **p;

	if (!x)
		return NULL;
	x->ep = ep;
	x->target = target;
	for (p = &ep->xfers; *p; p = &(*p)->next)	/* kept in order */
		;
	*p = x;
	return x;
}

/* Does this RMA go through the staging protocol? */
bool emu_hmem_rma_staged(struct emu_domain *dom, void **desc, size_t count,
			 const void *buf, uint64_t key)
{
	if (!emu_hmem_active())
		return false;
	if (hmem_mode == HMEM_ALL || (key & EMU_KEY_DEVICE))
		return true;
	if (!desc)
		return emu_hmem_is_device(buf);
	return emu_hmem_msg_staged(dom, desc, count);
}

/*
 * Starts a staged RMA for user (NULL: an inject, no completion).  Returns
 * 0 once it is on its way (its errors then complete user), or an error
 * with nothing started.
 */
ssize_t emu_hmem_rma(struct emu_ep *ep, bool write, const struct iovec *iov,
		     size_t count, const struct fi_rma_iov *rma, fi_addr_t addr,
		     uint64_t data, uint64_t flags, struct emu_req *user)
{
	size_t len = rma->len;
	struct emu_xfer *x = xfer_new(ep, false);

	if (!x)
		return -FI_ENOMEM;
	x->write = write;
	x->peer = addr;
	x->peer_tag = peer_hdr_tag(ep, addr);
	x->user = user;
	x->w = (struct emu_wire) {
		.id = emu_random(ep->domain) & EMU_ID_MASK, .key = rma->key, .addr = rma->addr, .len = len,
		.data = (uint32_t) data,
		.flags = write && (flags & FI_REMOTE_CQ_DATA) ? EMU_WIRE_DATA :
							        0,
	};
	if (!x->peer_tag) {
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: fi_addr %" PRIu64
			 " is not in the AV\n", (uint64_t) addr);
		x->user = NULL;
		xfer_free(x);
		return -FI_EINVAL;
	}
	x->b = bounce_new(ep->domain, len);
	if (!x->b || (write && gather(x->b->buf, iov, count))) {
		ssize_t ret = x->b ? -FI_EIO : -FI_ENOMEM;

		x->user = NULL;
		xfer_free(x);
		return ret;
	}
	if (!write) {
		memcpy(x->b->iov, iov, count * sizeof(*iov));
		x->b->count = count;
	}
	/* a read posts its payload's receive before asking for it */
	x->steps = STEP_HEADER | (len ? (write ? STEP_PAYLOAD_TX :
						  STEP_PAYLOAD_RX) : 0);
	x->waits = 1 + (len ? 1 : 0);	/* the ACK, the payload */
	xfer_kick(x);
	return 0;
}

/* ---- the target ------------------------------------------------------------------ */

/* The registration key names, if [addr, addr + len) lies in it with access. */
static int target_check(struct emu_xfer *x, uint64_t access)
{
	struct emu_mr *mr = emu_mr_find(x->ep->domain, x->w.key);
	const char *p = (const char *) (uintptr_t) x->w.addr;

	if (!mr)
		return FI_EKEYREJECTED;
	if (!(mr->access & access))
		return FI_EACCES;
	if (p < mr->buf || x->w.len > mr->len ||
	    p + x->w.len > mr->buf + mr->len)
		return FI_EINVAL;
	return 0;
}

/* A PUT's bytes are here: place them, raise the CQ data, answer. */
static void target_place(struct emu_xfer *x)
{
	struct emu_ep *ep = x->ep;
	struct emu_comp *c;

	if (!x->err && copy((void *) (uintptr_t) x->w.addr, x->b->buf,
			    x->w.len))
		x->err = FI_EIO;
	if (!x->err && (x->w.flags & EMU_WIRE_DATA) && ep->rx_cq &&
	    (c = calloc(1, sizeof(*c)))) {
		c->src = x->peer;
		c->e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
		c->e.data = x->w.data;
		c->e.len = x->w.len;
		emu_cq_push(ep->rx_cq, c);
	}
	x->steps |= STEP_ACK;
}

static void data_done(struct emu_req *req, const struct fi_cq_tagged_entry *e,
		      fi_addr_t src, int err)
{
	struct emu_xfer *x = emu_container_of(req, struct emu_xfer, data);

	if (err && !x->err)
		x->err = err;
	x->waits--;
	if (x->target && x->write)
		target_place(x);
	xfer_kick(x);
}

static void target_start(struct emu_ep *ep, const struct emu_wire *w,
			 fi_addr_t src)
{
	struct emu_xfer *x;

	if (src == FI_ADDR_NOTAVAIL) {
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA from a sender not in the "
			 "AV (or a core without FI_SOURCE): dropped\n");
		return;
	}
	x = xfer_new(ep, true);
	if (!x) {
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: no memory: dropped\n");
		return;
	}
	x->w = *w;
	x->peer = src;
	x->peer_tag = peer_hdr_tag(ep, src);
	if (!x->peer_tag) {
		/* no answer can go: untagged for us, it would reach the user */
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA from a sender the AV "
			 "cannot name: dropped\n");
		xfer_free(x);
		return;
	}
	x->write = w->type == EMU_PUT;
	x->err = target_check(x, x->write ? FI_REMOTE_WRITE : FI_REMOTE_READ);
	/*
	 * A refused PUT's payload is still received, so that it does not
	 * linger in the core, but only up to efa's largest RMA: the length
	 * comes from the wire, and a refused one was checked against nothing.
	 */
	if (x->err && (!x->write || w->len > emu_knobs.max_rma)) {
		x->steps = STEP_ACK;
	} else if (!(x->b = bounce_new(ep->domain, w->len))) {
		x->err = FI_ENOMEM;
		x->steps = STEP_ACK;	/* a PUT's payload then lingers */
	} else if (x->write) {
		if (w->len) {
			x->steps = STEP_PAYLOAD_RX;
			x->waits = 1;
		} else
			target_place(x);
	} else {
		if (!x->err && copy(x->b->buf, (void *) (uintptr_t) w->addr,
				    w->len))
			x->err = FI_EIO;
		x->steps = STEP_ACK | (x->err || !w->len ? 0 : STEP_PAYLOAD_TX);
		x->waits = x->steps & STEP_PAYLOAD_TX ? 1 : 0;
	}
	if (x->err)
		EMU_WARN(FI_LOG_EP_DATA, "staged %s refused: %s\n",
			 x->write ? "write" : "read", fi_strerror(x->err));
	xfer_kick(x);
}

static void initiator_ack(struct emu_ep *ep, const struct emu_wire *w)
{
	struct emu_xfer *x;

	for (x = ep->xfers; x; x = x->next)
		if (!x->target && x->w.id == w->id)
			break;
	if (!x) {
		EMU_WARN(FI_LOG_EP_DATA, "ACK for no staged RMA of ours\n");
		return;
	}
	x->waits--;
	if (w->status && !x->err) {
		x->err = w->status;
		/* a refused read's payload will not come */
		if (!x->write && x->b && x->b->len && x->waits &&
		    !fi_cancel(&ep->core->fid, &x->data.core_ctx))
			return;	/* its receive completes, cancelled */
		if (!x->write)
			x->waits = 0;
	}
	xfer_settle(x);
}

static ssize_t post_hdr_rx(struct emu_ep *ep, struct emu_hdr_rx *h);

static void hdr_done(struct emu_req *req, const struct fi_cq_tagged_entry *e,
		     fi_addr_t src, int err)
{
	struct emu_hdr_rx *h = emu_container_of(req, struct emu_hdr_rx, req);
	struct emu_ep *ep = req->ep;
	struct emu_wire w = h->w;

	if (post_hdr_rx(ep, h))
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: a header receive could "
			 "not be posted again\n");
	if (err || !e || e->len != sizeof(w) || w.magic != EMU_WIRE_MAGIC) {
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: bad header (err %d)\n",
			 err);
		return;
	}
	switch (w.type) {
	case EMU_PUT:
	case EMU_GET:
		target_start(ep, &w, src);
		break;
	case EMU_ACK:
		initiator_ack(ep, &w);
		break;
	default:
		EMU_WARN(FI_LOG_EP_DATA, "staged RMA: header type %u\n",
			 w.type);
	}
}

static ssize_t post_hdr_rx(struct emu_ep *ep, struct emu_hdr_rx *h)
{
	h->req.ep = ep;
	h->req.done = hdr_done;
	return fi_trecv(ep->core, &h->w, sizeof(h->w),
			ep->hdr_mr ? fi_mr_desc(ep->hdr_mr) : NULL,
			FI_ADDR_UNSPEC, ep->hdr_tag, 0, &h->req.core_ctx);
}

/* At fi_enable: the header receives every staged RMA starts with. */
int emu_hmem_ep_enable(struct emu_ep *ep)
{
	char name[EMU_NAME_MAX];
	size_t len = sizeof(name);
	int i, ret;

	if (!emu_hmem_active())
		return 0;
	ret = fi_getname(&ep->core->fid, name, &len);
	if (ret)
		return ret;
	ep->hdr_tag = hdr_tag_of(name, len);
	ep->hdr_rx = calloc(EMU_HDR_RX, sizeof(struct emu_hdr_rx));
	if (!ep->hdr_rx)
		return -FI_ENOMEM;
	ret = emu_core_reg_local(ep->domain, ep->hdr_rx,
				 EMU_HDR_RX * sizeof(struct emu_hdr_rx),
				 FI_RECV, &ep->hdr_mr);
	if (ret)
		return ret;
	for (i = 0; i < EMU_HDR_RX; i++) {
		ret = post_hdr_rx(ep, &((struct emu_hdr_rx *) ep->hdr_rx)[i]);
		if (ret)
			return ret;
	}
	return 0;
}

/* After the core endpoint closed: nothing of ours is posted any more. */
void emu_hmem_ep_close(struct emu_ep *ep)
{
	while (ep->xfers) {
		struct emu_xfer *x = ep->xfers;

		if (x->user)
			emu_req_free(x->user);
		x->user = NULL;
		xfer_free(x);
	}
	if (ep->hdr_mr)
		fi_close(&ep->hdr_mr->fid);
	free(ep->hdr_rx);
}
