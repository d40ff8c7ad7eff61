/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * efa_emu: a test-only libfabric provider named "efa", for machines without
 * EFA.  It forwards to tcp (tcp;ofi_rxm on 1.x) and presents what efa
 * presents and enforces what efa enforces (docs/efa.md has the table):
 * fabrics "efa-direct" (first) and "efa", one domain rdmap<bus>s0-rdm per
 * emulated NIC, 4 bytes of CQ data, 32-bit provider keys, FI_MR_LOCAL,
 * FI_CONTEXT2 on efa-direct, one rma_iov, no RMA inject on efa-direct, no
 * ordering between writes nor within one.  Never installed: make check
 * builds it and tests point FI_PROVIDER_PATH at it.
 */
#ifndef EFA_EMU_H
#define EFA_EMU_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#define EMU_FABRIC_DIRECT	"efa-direct"
#define EMU_FABRIC_RDM		"efa"
#define EMU_MAX_NICS		32
#define EMU_CQ_DATA_SIZE	4	/* efa_cq.h: EFA_CQ_DATA_SIZE */
#define EMU_KEY_SIZE		4	/* the ibv rkey */
#define EMU_MTU			8928	/* efa's payload MTU: one packet */
#define EMU_RDM_IOV_LIMIT	4	/* EFA_RDM_IOV_LIMIT */
#define EMU_DIRECT_IOV_LIMIT	2	/* a device's max_sq_sge */
#define EMU_DIRECT_RMA_SGE	1	/* EFA_IO_TX_DESC_NUM_RDMA_BUFS */
#define EMU_DIRECT_INLINE	32	/* a device's inline_buf_size (MSG) */
#define EMU_MR_MAGIC		0x6566616d72ULL	/* "efamr" */

/* Device registrations' keys (efa_emu_hmem.c); host ones have it clear. */
#define EMU_KEY_DEVICE		(1ULL << 31)
/* The largest core address (tcp's: a sockaddr_in6). */
#define EMU_NAME_MAX		64
/* Tags with this bit are the test provider's own (staged RMA). */
#define EMU_TAG_INTERNAL	(1ULL << 62)

/* libfabric's OFI_GETINFO_HIDDEN: reach tcp while FI_PROVIDER hides it. */
#define EMU_GETINFO_HIDDEN	(1ULL << 60)

/*
 * Endpoint options by value (1.17's headers lack all but
 * FI_OPT_EFA_RNR_RETRY): efa_rdm_ep_setopt's that the emulation keeps.
 */
#define EMU_OPT_CUDA_API_PERMITTED	10
#define EMU_OPT_SHARED_MEMORY_PERMITTED	11
#define EMU_OPT_MAX_MSG_SIZE		12
#define EMU_OPT_MAX_TAGGED_SIZE		13
#define EMU_OPT_EFA(n)			(-(0xefa << 16) + (n))
#define EMU_OPT_EFA_RNR_RETRY		EMU_OPT_EFA(0)
#define EMU_OPT_EFA_EMULATED_READ	EMU_OPT_EFA(1)
#define EMU_OPT_EFA_EMULATED_WRITE	EMU_OPT_EFA(2)
#define EMU_OPT_EFA_EMULATED_ATOMICS	EMU_OPT_EFA(3)
#define EMU_OPT_EFA_USE_DEVICE_RDMA	EMU_OPT_EFA(4)
#define EMU_OPT_EFA_SENDRECV_IN_ORDER	EMU_OPT_EFA(5)
#define EMU_OPT_EFA_WRITE_IN_ORDER	EMU_OPT_EFA(6)
#define EMU_OPT_EFA_HOMOGENEOUS_PEERS	EMU_OPT_EFA(7)

struct emu_opts {
	bool cuda_api_permitted;
	bool shm_permitted;
	bool use_device_rdma;
	bool write_in_order;
	bool homogeneous_peers;
	size_t rnr_retry;
	size_t max_msg;			/* sends beyond: -FI_EINVAL */
	size_t max_tagged;
};

/*
 * A write's CQ data on the core: efa's 32 bits, and above them the whole
 * write's length, which the target reports as efa does (the core writes in
 * halves, and would report the half's).
 */
static inline uint64_t emu_wire_data(uint64_t data, size_t len)
{
	if (len > 0xffffffffu)
		len = 0xffffffffu;
	return (data & 0xffffffffu) | (uint64_t) len << 32;
}

extern struct fi_provider emu_prov;

#define EMU_WARN(subsys, ...)	FI_WARN(&emu_prov, subsys, __VA_ARGS__)
#define EMU_INFO(subsys, ...)	FI_INFO(&emu_prov, subsys, __VA_ARGS__)

struct emu_nic {
	unsigned int bus, slot;		/* its PCI address 0000:bus:slot.0 */
	char domain[32];		/* rdmap<bus>s0-rdm */
	char core_domain[64];		/* lo, or a testbed veth */
};

struct emu_knobs {
	char *nics;			/* "79=lo,80=lo,..." */
	char *core;
	size_t max_rma;
	int reorder_us;			/* writes held up to this long */
	char *fail_nic;			/* bus of the NIC that fails */
	int fail_after;			/* its tx ops that succeed first */
	int fail_ms;			/* the fault lasts this long; 0: ever */
	bool fail_stall;		/* stall (completions held) instead */
	bool fail_refuse;		/* or refuse every post (-FI_EAGAIN) */
	bool fail_on_fence;		/* a 0-byte RMA begins the fault */
	int eagain_every;		/* every Nth post starts a burst */
	int eagain_burst;		/* of this many -FI_EAGAIN */
	char *eagain_nic;		/* on this NIC only (NULL: all) */
	int delay_us;			/* completions held this long */
	int no_readfrom;		/* CQs without fi_cq_readfrom, and no
					 * FI_SOURCE: a core that never had it */
	char *opt_refuse_nic;		/* its endpoints refuse efa's options */
};

extern struct emu_knobs emu_knobs;
extern struct emu_nic emu_nics[EMU_MAX_NICS];
struct fid_nic *emu_nic_new(unsigned int bus, unsigned int slot);
extern int emu_nnics;

struct emu_fabric {
	struct fid_fabric fabric_fid;
	bool direct;
};

struct emu_domain {
	struct fid_domain domain_fid;
	bool direct;
	const struct emu_nic *nic;
	bool failing;			/* the fault knobs name this NIC */
	bool eagain_here;		/* the EAGAIN knobs apply here */
	bool opt_refuse;		/* efa's bool options: -FI_EOPNOTSUPP */
	uint64_t tx_ops;		/* for fail_after */
	uint64_t fail_start_ns;		/* the first faulty transmit */
	struct fi_info *core_info;
	struct fid_fabric *core_fabric;
	struct fid_domain *core_domain;
	uint64_t mr_local;		/* FI_MR_LOCAL was granted */
	pthread_mutex_t lock;
	uint64_t rng;
	struct emu_mr *mrs;		/* for staged RMA's target (by key) */
};

struct emu_mr {
	struct fid_mr mr_fid;
	uint64_t magic;
	struct emu_domain *domain;
	struct fid_mr *core;		/* NULL for device memory */
	const char *buf;
	size_t len;
	uint64_t access;
	enum fi_hmem_iface iface;
	struct emu_mr *next;
};

struct emu_comp {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	int err, prov_errno;
	uint64_t ready_ns;
	struct emu_comp *next;
};

#define EMU_EPS_PER_CQ	64

struct emu_cq {
	struct fid_cq cq_fid;
	struct emu_domain *domain;
	struct fid_cq *core;
	enum fi_cq_format format;
	struct emu_comp *head, **tail;	/* ready in order, errors too */
	struct emu_ep *eps[EMU_EPS_PER_CQ];
	int neps;
};

struct emu_req;
struct emu_bounce;
typedef void (*emu_done_fn)(struct emu_req *req,
			    const struct fi_cq_tagged_entry *e, fi_addr_t src,
			    int err);

/* One user operation: may be several core operations (halves). */
struct emu_req {
	struct fi_context2 core_ctx;	/* what the core holds: first */
	emu_done_fn done;		/* the provider's own operation */
	struct emu_bounce *bounce;	/* device memory through host memory */
	struct emu_ep *ep;
	struct emu_cq *cq;		/* NULL: no completion wanted */
	void *context;
	uint64_t flags;			/* completion flags */
	size_t len;
	int pending;			/* core operations outstanding */
	int err, prov_errno;
	uint64_t hold_until_ns;		/* a stalled NIC: completion held */
	struct emu_req *live_next;	/* the endpoint's requests not yet */
	struct emu_req **live_pprev;	/* done: freed at its close */
};

/* A posted RMA held back to be placed after a later one (no ordering). */
struct emu_rma {
	bool write;
	struct iovec iov[EMU_RDM_IOV_LIMIT];
	void *desc[EMU_RDM_IOV_LIMIT];
	size_t count;
	struct fi_rma_iov rma;
	fi_addr_t addr;
	uint64_t data;
	uint64_t flags;
	struct emu_req *req;
	bool tail_posted;		/* its second part is in flight */
	uint64_t due_ns;		/* held until */
	struct emu_rma *next;
};

struct emu_ep {
	struct fid_ep ep_fid;
	struct emu_domain *domain;
	struct fid_ep *core;
	struct emu_cq *tx_cq, *rx_cq;
	bool tx_selective, rx_selective;
	uint64_t caps;
	uint64_t posts;			/* for the EAGAIN bursts */
	int eagain_left;
	struct emu_rma *held, **held_tail;	/* placed later, in order */
	struct emu_xfer *xfers;		/* staged RMAs under way, in order */
	void *hdr_rx;			/* their header receives */
	struct fid_mr *hdr_mr;
	struct fid_av *av;		/* the core's, as bound */
	uint64_t hdr_tag;		/* headers to us carry it */
	struct emu_req *live;		/* requests the core may still hold */
	struct emu_opts opts;
	bool enabled;
};

int emu_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints,
		struct fi_info **info);
int emu_core_info(uint32_t version, const struct emu_nic *nic,
		  const struct fi_info *ours, struct fi_info **core);
int emu_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **domain, void *context);
int emu_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **ep, void *context);
int emu_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context);
void emu_cq_push(struct emu_cq *cq, struct emu_comp *c);
void emu_req_done(struct emu_req *req, const struct fi_cq_tagged_entry *e,
		  fi_addr_t src);
void emu_req_free(struct emu_req *req);
void emu_ep_flush(struct emu_ep *ep);
struct emu_mr *emu_mr_of(struct emu_domain *dom, void *desc);
uint64_t emu_now_ns(void);
struct emu_mr *emu_mr_find(struct emu_domain *dom, uint64_t key);
int emu_core_regattr(struct emu_domain *dom, struct fi_mr_attr *attr,
		     uint64_t flags, struct fid_mr **mr);
int emu_core_reg_local(struct emu_domain *dom, void *buf, size_t len,
		       uint64_t access, struct fid_mr **mr);

/* efa_emu_hmem.c: device memory, through host copies */
void emu_hmem_init(void);
void emu_hmem_fini(void);
bool emu_hmem_offered(void);
bool emu_hmem_active(void);
bool emu_hmem_is_device(const void *buf);
void *emu_hmem_host_copy(const void *buf, size_t len);
bool emu_hmem_msg_staged(struct emu_domain *dom, void **desc, size_t count);
int emu_hmem_msg_bounce(struct emu_ep *ep, bool tx, struct emu_req *req,
			struct fi_msg_tagged *msg, struct iovec *iov,
			void **desc, size_t len);
void emu_hmem_req_done(struct emu_req *req,
		       const struct fi_cq_tagged_entry *e);
bool emu_hmem_rma_staged(struct emu_domain *dom, void **desc, size_t count,
			 const void *buf, uint64_t key);
ssize_t emu_hmem_rma(struct emu_ep *ep, bool write, const struct iovec *iov,
		     size_t count, const struct fi_rma_iov *rma, fi_addr_t addr,
		     uint64_t data, uint64_t flags, struct emu_req *user);
void emu_hmem_flush(struct emu_ep *ep);
int emu_hmem_ep_enable(struct emu_ep *ep);
void emu_hmem_ep_close(struct emu_ep *ep);
uint64_t emu_random(struct emu_domain *dom);
int emu_nosys(void);

#define emu_container_of(p, type, member) \
	((type *) ((char *) (p) - offsetof(type, member)))

#endif /* EFA_EMU_H */
