/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * multirail: one virtual RDM endpoint striped over the domains ("rails") of
 * a core provider.  Internal declarations shared by the object files.
 */
#ifndef MRL_H
#define MRL_H

#ifdef HAVE_CONFIG_H
#include "config.h"	/* MRL_DEBUG: --enable-debug */
#endif
#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
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

#include "mrl_cq.h"
#include "mrl_match.h"
#include "mrl_enosys.h"
#include "mrl_proto.h"
#include "mrl_sched.h"
#include "mrl_stripe.h"
#include "mrl_topo.h"

#define MRL_PROV_NAME	"multirail"
#define MRL_VERSION	FI_VERSION(0, 1)
#define MRL_FABRIC_PREFIX "multirail/"

/*
 * libfabric hides the other providers when FI_PROVIDER names only us; its
 * own utility providers reach them with this getinfo flag (OFI_GETINFO_HIDDEN
 * in libfabric's include/ofi.h, the same bit in 1.17 through 2.x).
 */
#define MRL_GETINFO_HIDDEN	(1ULL << 60)
/* libfabric's OFI_CORE_PROV_ONLY: what utility providers ask their core
 * with; it skips hidden providers. */
#define MRL_GETINFO_CORE_ONLY	(1ULL << 59)

/*
 * Names libfabric 2.x deprecated (each use warns there), with the values
 * 1.x gives them: we still have to recognise them in an application's hints.
 */
#if FI_MAJOR_VERSION >= 2
#define MRL_MR_BASIC		(1 << 0)
#define MRL_MR_SCALABLE		(1 << 1)
#define MRL_ORDER_NONE		0ULL
#else
#define MRL_MR_BASIC		FI_MR_BASIC
#define MRL_MR_SCALABLE		FI_MR_SCALABLE
#define MRL_ORDER_NONE		FI_ORDER_NONE
#endif

extern struct fi_provider mrl_prov;

#define MRL_WARN(subsys, ...)	FI_WARN(&mrl_prov, subsys, __VA_ARGS__)
#define MRL_INFO(subsys, ...)	FI_INFO(&mrl_prov, subsys, __VA_ARGS__)
#define MRL_DBG(subsys, ...)	FI_DBG(&mrl_prov, subsys, __VA_ARGS__)
/* For what a broken rail or peer would say once per chunk or message. */
#define MRL_WARN_ONCE(subsys, ...) \
	FI_WARN_ONCE(&mrl_prov, subsys, __VA_ARGS__)

/* Run-time knobs, read once at provider init (FI_MULTIRAIL_*). */
struct mrl_params {
	char *rails;		/* comma list of core domain names */
	char *core;		/* core provider name */
	char *core_fabric;	/* one of the core's fabrics (efa-direct) */
	size_t chunk_size;
	size_t stripe_min;
	char *policy;
	char *topo_xml;		/* hwloc XML instead of this host */
	int rails_per_gpu;	/* 0: every rail of the closest class */
	int max_learned;	/* peers known only from control messages */
	int rail_timeout_ms;	/* a rail stuck this long is out; 0: never */
	int connect_timeout_ms;	/* the same until a peer answers */
	char *messages;		/* "striped": the message path over every
				 * rail (mrl_msg.h); else rail 0's core */
};
extern struct mrl_params mrl_params;


/*
 * Every context handed to a core provider starts with this header, so that
 * progress routes each core completion to its owner: the core owns ctx
 * while the request is in flight (FI_CONTEXT2-sized), kind says what the
 * request is.  A chunk's lives in the room the engine leaves for it.
 */
enum mrl_req_kind {
	MRL_REQ_CHUNK = 1,
	MRL_REQ_MSG,
	MRL_REQ_CTRL_RX,
	MRL_REQ_CTRL_TX,
	MRL_REQ_BOUNCE,			/* a control buffer carrying an inject */
	MRL_REQ_FENCE,
	MRL_REQ_PROBE,			/* is a failed rail back? mrl_health.c */
	MRL_REQ_DATA_FLUSH,		/* behind a WRITE_DATA: it arrived
					 * (mrl_ctrl.c) */
	MRL_REQ_PKT_RX,			/* a message packet buffer (mrl_pkt.c) */
	MRL_REQ_PKT_TX,
};

struct mrl_req_hdr {
	struct fi_context2 ctx;
	enum mrl_req_kind kind;
};

_Static_assert(sizeof(struct mrl_req_hdr) <=
	       sizeof(((struct mrl_chunk *) 0)->rail_ctx),
	       "a chunk has room for its core context");
_Static_assert(offsetof(struct mrl_chunk, rail_ctx) == 0,
	       "the core context starts the chunk");

static inline struct mrl_req_hdr *mrl_chunk_hdr(struct mrl_chunk *chunk)
{
	return (struct mrl_req_hdr *) chunk->rail_ctx;
}

/* ---- composite address ---------------------------------------------- */


/* ---- fi_info rails --------------------------------------------------- */

int mrl_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints,
		struct fi_info **info);
int mrl_core_getinfo_rail(uint32_t version, const char *core_name,
			  const char *core_fabric, const char *domain_name,
			  const struct fi_info *info, bool source,
			  struct fi_info **core);
int mrl_parse_fabric_name(const char *name, char *core, size_t len,
			  char *fabric, size_t flen);
int mrl_split_rails(const char *domain_name, char ***names);
void mrl_free_names(char **names);
struct fi_info *mrl_core_hints(const struct fi_info *hints,
			       const char *core_name);
uint64_t mrl_user_mr_mode(const struct fi_info *hints, uint64_t core_mode,
			  uint64_t caps);
const char *mrl_hints_miss(const struct fi_info *fi, const struct fi_info *h);
void mrl_fill_info(struct fi_info *info, const struct fi_info *core,
		   const struct fi_info *hints);

/* ---- fabric ------------------------------------------------------------ */

struct mrl_fabric {
	struct fid_fabric fabric_fid;
	char core_name[128];
	char core_fabric[128];		/* "": any of the core's fabrics */
	uint32_t version;
};

int mrl_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		    void *context);

/* ---- domain -------------------------------------------------------------- */

struct mrl_rail {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
};

struct mrl_raw_map;

struct mrl_domain {
	struct fid_domain domain_fid;
	struct mrl_fabric *fabric;
	struct fi_info *info;		/* ours, duplicated */
	int nrails;
	struct mrl_rail rails[MRL_MAX_RAILS];
	uint64_t mr_mode;		/* what we advertised */
	bool core_mr_local;
	size_t core_max_msg;
	size_t inject_size;
	size_t cq_data_size;
	uint64_t key0_mask;		/* rail 0's key from ours: key &
					 * key0_mask; MRL_KEY_CORE_MASK where
					 * the core's keys are 32 bits (ours
					 * are gen|key0), else all ones */
	bool ctrl_own_ep;		/* no FI_TAGGED: a control endpoint */
	bool src0;			/* rail 0's core reports sources
					 * (FI_SOURCE): control claims checked */
	bool rma_one_iov;		/* one local iov per core RMA */
	bool fence_by_read;		/* flush a rail by reading (shm) */
	bool core_writedata;		/* the core's writedata raises the
					 * target's entry, with its length,
					 * after its bytes (mrl_domain.c) */
	bool acked_writes;		/* a write completes once the peer has
					 * it (efa): a failed rail loses none
					 * that completed */
	uint32_t key_gen;
	pthread_mutex_t lock;
	bool locking;			/* false under FI_THREAD_DOMAIN */
#ifdef MRL_DEBUG
	bool lock_held;			/* and by whom: mrl_assert_locked */
	pthread_t lock_owner;
#endif
	int children;			/* open objects: close is -FI_EBUSY */
	struct mrl_list mrs;		/* registrations */
	struct mrl_mr **mr_hash;	/* the keyed ones by key: a peer's key
					 * question is answered in O(1) */
	size_t mr_nhash, mr_nhashed;
	struct mrl_raw_map *raw_maps;	/* fi_mr_map_raw results */
	size_t nraw_maps;
	enum mrl_policy policy;
	struct mrl_loc rail_loc[MRL_MAX_RAILS];
	int rails_located;		/* rails with a known place */
};

int mrl_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **domain, void *context);

/* ---- memory registration ---------------------------------------------- */

struct mrl_mr {
	struct fid_mr mr_fid;
	struct mrl_domain *domain;
	uint64_t key0;			/* rail 0's core key */
	struct fid_mr *core[MRL_MAX_RAILS];
	void *core_desc[MRL_MAX_RAILS];
	enum fi_hmem_iface iface;
	uint64_t access;		/* FI_REMOTE_*: what peers may do */
	uint32_t near_mask;		/* rails nearest the buffer; 0: any */
	struct mrl_list link;
	struct mrl_mr *hnext;		/* its key's bucket (mrl_mr_find) */
	bool hashed;
};

struct mrl_raw_map {
	bool used;
	int nrails;
	uint64_t keys[MRL_MAX_RAILS];
};

int mrl_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
	       uint64_t offset, uint64_t requested_key, uint64_t flags,
	       struct fid_mr **mr, void *context);
int mrl_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		uint64_t access, uint64_t offset, uint64_t requested_key,
		uint64_t flags, struct fid_mr **mr, void *context);
int mrl_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		   uint64_t flags, struct fid_mr **mr);
struct mrl_mr *mrl_mr_find(struct mrl_domain *domain, uint64_t key);
int mrl_mr_map_raw(struct fid_domain *domain, uint64_t base_addr,
		   uint8_t *raw_key, size_t key_size, uint64_t *key,
		   uint64_t flags);
int mrl_mr_unmap_key(struct fid_domain *domain, uint64_t key);
const struct mrl_raw_map *mrl_raw_lookup(struct mrl_domain *domain,
					 uint64_t key);
void *mrl_desc_rail(void *desc, int rail);

/* ---- address vector ------------------------------------------------------ */

#include "mrl_keys.h"
#include "mrl_fence.h"
#include "mrl_health.h"
#include "mrl_peer.h"

struct mrl_ep;

struct mrl_av {
	struct fid_av av_fid;
	struct mrl_domain *domain;
	enum fi_av_type type;
	int nrails;
	struct fid_av *core[MRL_MAX_RAILS];
	struct mrl_peer **table;	/* user fi_addr -> peer (TABLE) */
	size_t count, size;
	struct mrl_peer **all;		/* every peer, user's or hidden */
	size_t nall, sizeall;
	struct mrl_av_slot {
		uint32_t hash;		/* of the peer's rail-0 address */
		uint32_t pos;		/* 1 + its index in all; 0: empty */
	} *slots;			/* every peer by its rail-0 address
					 * (mrl_av.c): O(1) to find */
	size_t nslots;			/* a power of two */
	struct mrl_peer **by_core0;	/* rail 0's core fi_addr -> peer (its
					 * own entry and its control
					 * endpoint's) */
	size_t nby_core0;
	struct mrl_ep *ep;		/* bound endpoint, for handshakes */
	int nbound;			/* endpoints bound: close is -FI_EBUSY */
	bool hello_due;			/* a partial peer awaits its HELLO */
	int nlearned;			/* peers not in the user's AV */
	uint64_t clock;			/* counts control messages learned from */
	uint64_t evicted;		/* learned peers that made room */
};

int mrl_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		struct fid_av **av, void *context);
/* The peer behind a user's fi_addr, NULL for none: every op asks. */
static inline struct mrl_peer *mrl_av_peer(const struct mrl_av *av,
					   fi_addr_t addr)
{
	return addr < av->count ? av->table[addr] : NULL;
}
fi_addr_t mrl_av_src_addr(struct mrl_av *av, fi_addr_t core_addr0);
/* Where a control message came from, as far as we can tell. */
struct mrl_ctrl_from {
	fi_addr_t src;			/* the core's source, rail 0's AV */
	bool checked;			/* the core reports sources */
	uint32_t ack_nonce;		/* a HELLO_ACK's echo of ours, else 0 */
	int rail;			/* it came on: a question's answer goes
					 * back there */
};

struct mrl_peer *mrl_av_learn(struct mrl_av *av, const void *addr,
			      size_t len, const struct mrl_ctrl_from *from);
bool mrl_av_claim_from(struct mrl_av *av, const void *addr, size_t len,
		       const struct mrl_ctrl_from *from);
int mrl_av_insert_core(struct mrl_av *av, struct mrl_peer *peer, int from);
struct mrl_peer *mrl_av_peer_by_id(struct mrl_av *av, uint64_t id);
uint64_t mrl_av_peer_id(struct mrl_peer *peer);

/* ---- completion queue / counter / eq ------------------------------------ */

/* Message requests beyond the core's tx and rx sizes. */
#define MRL_MSG_SPARE_REQS	64

/* Time is read every MRL_HEALTH_TICK progress calls, not per op. */
#define MRL_HEALTH_TICK		64

/* Core counters of every endpoint bound to one counter (4 endpoints). */
#define MRL_CNTR_MAX_CORE	(MRL_MAX_RAILS * 4)

struct mrl_cntr {
	struct fid_cntr cntr_fid;
	struct mrl_domain *domain;
	uint64_t value, err;
	struct mrl_ep *eps[MRL_EPS_PER_CQ];
	int neps;
	/* remote events counted by the core, one counter per rail */
	struct fid_cntr *core[MRL_CNTR_MAX_CORE];
	int ncore;
	/* the cores' counts cannot be rewound: fi_cntr_set/seterr shift ours */
	uint64_t core_base, err_base;
};

int mrl_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		  struct fid_cntr **cntr, void *context);
static inline void mrl_cntr_inc(struct mrl_cntr *cntr)
{
	if (cntr)
		cntr->value++;
}
void mrl_cntr_inc_err(struct mrl_cntr *cntr);
int mrl_cntr_attach(struct mrl_cntr *cntr, struct mrl_ep *ep);
void mrl_cntr_detach(struct mrl_cntr *cntr, struct mrl_ep *ep);
int mrl_cntr_open_core(struct mrl_cntr *cntr, int rail,
		       struct fid_domain *core_domain, struct fid_cntr **out);

struct mrl_eq {
	struct fid_eq eq_fid;
	struct mrl_fabric *fabric;
};

int mrl_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq, void *context);

/* ---- endpoint -------------------------------------------------------------- */

/* A user message op passed through to a rail: routes its completion. */
struct mrl_msg_req {
	struct mrl_req_hdr hdr;		/* must stay first */
	void *context;
	uint64_t flags;			/* FI_SEND|FI_MSG, FI_RECV|FI_TAGGED... */
	size_t len;
	struct mrl_msg_req *next_free;
	void *copy;			/* a send of more iovs than the core
					 * takes: from this copy of them */
	struct fid_mr *copy_mr;
};

MRL_DECLARE_FREE_STACK(struct mrl_msg_req, mrl_msg_req_stack)

/* The most local and remote iovs of one RMA op (scatter-gather, mrl_rma.c) */
#define MRL_SG_IOV_MAX		256

/* A user RMA op: the engine's op plus what its completion needs. */
struct mrl_rma_req {
	struct mrl_op op;
	struct mrl_rma_req *next_free;	/* free list, or the endpoint's
					 * write_data_wait */
	struct mrl_rma_req *parent;	/* a piece of a scatter-gather op:
					 * completes into its head (mrl_rma.c) */
	/* a head: its pieces out, whether all went, the first's error */
	uint32_t pieces_out;
	bool pieces_all_posted;
	int pieces_err;
	int prov_errno;			/* the core's, of the first chunk
					 * that failed (0: none, or ours) */
	bool write_data;		/* a writedata: once its bytes landed,
					 * a WRITE_DATA raises the target's
					 * entry, and its send completes the
					 * op (mrl_rma_send_write_data) */
};

#define MRL_CTRL_RX_COUNT	64	/* on rail 0: every writedata's entry
					 * comes in one (mrl_ctrl.c) */
#define MRL_CTRL_RAIL_RX_COUNT	2	/* on each other rail: RAIL_UP only */
#define MRL_CTRL_RX_ANY		4	/* of rail 0's: for senders that know
					 * us by a partial address */
#define MRL_CTRL_TX_COUNT	64


struct mrl_ctrl_buf {
	struct mrl_req_hdr hdr;		/* must stay first */
	struct mrl_ctrl_buf *next_free;	/* free list, or backlog order */
	int rail;			/* receive: posted on; send: goes on */
	uint64_t tag;			/* receive: takes; send: carries */
	size_t len;			/* backlogged send: its length */
	fi_addr_t dest;			/* and its destination on rail */
	struct mrl_peer *peer;		/* (peers live as long as the AV) */
	struct mrl_rma_req *write_data_op; /* a WRITE_DATA's op: completes with
					 * the send */
	bool inject_data;		/* a bounce (or WRITE_DATA) for
					 * fi_inject_writedata */
	bool flush;			/* its WRITE_DATA went: now a zero-byte
					 * flush behind it, to wd_addr */
	bool loss_told;			/* the flush's connection was reset:
					 * its loss is reported already */
	uint64_t flush_ns;		/* when the flush was queued */
	uint64_t wd_addr, wd_key;	/* the writedata's target and user key */
	uint64_t flush_key;		/* wd_key's on the flush's rail */
	uint64_t cq_data;		/* its CQ data and length */
	size_t data_len;
	uint8_t data[MRL_CTRL_BUF_SIZE];
};

MRL_DECLARE_FREE_STACK(struct mrl_ctrl_buf, mrl_ctrl_buf_stack)

struct mrl_ep_rail {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_cntr *rcntr;		/* remote events, if asked for */
	size_t addrlen;
	uint64_t ctrl_sent, ctrl_received;
	struct fid_mr *ctrl_mr;		/* control buffers, FI_MR_LOCAL cores */
	struct fid_mr *pkt_mr;		/* message packet buffers, the same */
	int pkt_out;			/* our packets in flight here */
	uint64_t pkts_sent, pkt_bytes_sent, pkts_received;
	uint64_t pkts_done;		/* completed: the stall watch's count */
	/* health (mrl_health.c) */
	uint64_t watch_completions, watch_since_ns;
	uint64_t quiet_since_ns;	/* the last completion's time, or the
					 * work's start: kept across firings */
	uint32_t fences;		/* fences in flight: work the stall
					 * watch sees, as it sees chunks */
	uint64_t fences_done;
	int peers_down;			/* peers this rail is out for */
	uint64_t downs, probes, rejoins;
	uint64_t resets;		/* connections reset under the core
					 * (mrl_reset.c) */
	uint64_t losses;		/* flushes that failed or never came:
					 * writes that may not have landed */
	uint32_t nonchunk;		/* fences, probes, control sends and
					 * (rail 0) message requests in
					 * flight: progress reads the rail */
	bool reads_src;			/* its core's sources are read: the
					 * user's FI_SOURCE, rail 0's claims,
					 * message packets' senders */
	bool names_src;			/* its core has FI_SOURCE: what it
					 * reads there names the sender */
};

struct mrl_ep {
	struct fid_ep ep_fid;
	struct mrl_domain *domain;
	struct fi_info *info;
	int nrails;
	struct mrl_ep_rail rails[MRL_MAX_RAILS];
	struct mrl_av *av;
	struct mrl_cq *tx_cq, *rx_cq;
	uint64_t tx_cq_flags, rx_cq_flags;	/* FI_SELECTIVE_COMPLETION */
	bool rma_cq_only;		/* an RMA op's completion is a tx CQ
					 * entry, no counter (mrl_rma_done) */
	struct mrl_cntr *cntr_write, *cntr_read, *cntr_send, *cntr_recv;
	struct mrl_cntr *cntr_rwrite, *cntr_rread;
	uint64_t tx_op_flags, rx_op_flags;
	size_t tx_iov_limit, rx_iov_limit;	/* what fi_getinfo said */
	size_t msg_iov_limit;		/* a send of more is sent from a copy */
	bool enabled;
	void *name;			/* our composite address */
	size_t namelen;

	struct mrl_engine engine;
	struct mrl_rma_req *rma_reqs;	/* pool */
	struct mrl_rma_req *rma_free;
	size_t rma_pool_size;
	struct mrl_msg_req *msg_reqs;
	struct mrl_msg_req *msg_free;
	size_t msg_pool_size;
	uint32_t rr_next;		/* round-robin rail for small ops */
	size_t whole_max;		/* the fast path's ops: len - 1 below
					 * (mrl_rma_tx_flags_set) */
	size_t whole_limit;		/* the same, flags aside */
	struct mrl_sched_params sched;		/* host memory */
	struct mrl_sched_params sched_device;	/* FI_HMEM other than system */

	/* control channel: rail 0, and RAIL_UP on the others */
	struct fid_ep *ctrl_ep;		/* cores without FI_TAGGED: on rail 0 */
	struct mrl_ctrl_buf *ctrl_bufs;
	size_t ctrl_nbufs;
	struct mrl_ctrl_buf *ctrl_tx_free;
	struct mrl_ctrl_buf *ctrl_backlog, **ctrl_backlog_tail;
	/* writedata ops landed, waiting for a control buffer, in order */
	struct mrl_rma_req *write_data_wait, **write_data_wait_tail;
	bool compact_logged;		/* fi_getname gave rail 0 alone */
	uint64_t ctrl_dropped[MRL_CTRL_DROP_KINDS];	/* by reason */
	uint64_t ctrl_tx_dropped;	/* sends for a rail out of service */
	uint64_t ctrl_rng;		/* KEY_REQ nonces */
	bool ctrl_enabled;
	int rails_enabled;		/* core endpoints enabled so far */
	bool ctrl_ep_enabled;
	bool no_rma_inject;		/* the core said -FI_ENOSYS to one */
	bool enable_failed;		/* with receives posted: close only */
	bool progress_held;		/* not enabled yet, or a progress call
					 * up the stack: progress returns */
	bool want_src;			/* FI_SOURCE: cores' sources wanted */
	uint64_t now_ns;		/* the clock at the last health tick */
	int health_left;		/* progress calls to the next tick */
	uint32_t watched_rails;		/* busy at the last tick */
	int sick_peers;			/* peers with a rail down we probe */
	bool unreachable_due;		/* a peer lost its last rail */
	bool parked_ops;		/* ops wait for keys (mrl_rma_park) */
	/* which rails progress reads (mrl_progress.c) */
	uint32_t nonchunk_busy;		/* rails with requests other than
					 * the engine's chunks (and
					 * rail 0 while the cores hold
					 * message requests) */
	int rail0_reads_due;		/* reads of rail 0 due after an inject */
	int poll_next;			/* the next idle rail read (while
					 * leased: the leases' cursors) */
	int read_turn;			/* the busy rail read first */
	unsigned int poll_calls;
	bool leased;			/* its lean CQs' leases granted */
	/* rails 0, 1, ... in turn, as far as any lease can go from any */
	struct mrl_ep_rail *idle_cycle[MRL_MAX_RAILS + MRL_HEALTH_TICK];
	bool lease_off;			/* a core without fi_cq_readfrom */
	uint64_t lost_sends;		/* sends failed for writes a failed
					 * rail may have lost (mrl_fence.c) */
	uint64_t rma_general;		/* RMA ops the general way took
					 * (fi_multirail_ep_stats) */

	/* the striped message path (mrl_msg.h): messages over every rail */
	bool msg_striped;
	uint64_t pkt_id;		/* ours: mrl_pkt_id of our address */
	uint64_t pkt_tag[MRL_MAX_RAILS];	/* ours on each rail */
	struct mrl_pkt_buf *pkt_bufs;	/* receives on each rail, then sends */
	size_t pkt_nbufs, pkt_nrx;
	struct mrl_pkt_buf *pkt_tx_free;
	size_t pkt_tx_nfree;
	struct mrl_pkt_buf *pkt_backlog, **pkt_backlog_tail;
	struct mrl_pkt_buf *pkt_rx_unposted;	/* receives the core refused
						 * again: the tick retries */
	struct mrl_send *msg_sends, *msg_send_free;
	void *msg_recv_cache, *msg_rmsg_cache;	/* freed, for reuse */
	unsigned int msg_nrecv_cache, msg_nrmsg_cache;
	size_t msg_named_at;		/* av->count when unexpected messages
					 * last learned their senders' names */
	struct mrl_list msg_sending;	/* sends with segments still to go */
	struct mrl_list msg_acks;	/* connections with an ACK due */
	struct mrl_list msg_acks_later;	/* and at the next health tick */
	struct mrl_conn **conns;	/* MRL_CONN_BUCKETS */
	size_t nconns;
	struct mrl_conn *last_conn;	/* the last one found: a run of sends
					 * goes to one peer */
	struct mrl_match_queue mq_msg, mq_tagged;
	size_t min_multi_recv;
	int pkt_rr;			/* rail turn among equally loaded */
	uint64_t pkt_watch_ns;		/* the ACK watch's next look */
	uint64_t pkt_dropped[MRL_PKT_DROP_KINDS];	/* by reason */
	uint64_t msg_dups;		/* messages that came twice */
};

static inline struct mrl_ep *mrl_ep_of(struct fid_ep *ep)
{
	return mrl_container_of(ep, struct mrl_ep, ep_fid);
}

int mrl_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **ep, void *context);

/* The core endpoints of ours: every rail's, then the control endpoint. */
static inline int mrl_ep_ncore(const struct mrl_ep *ep)
{
	return ep->nrails + !!ep->ctrl_ep;
}

static inline struct fid_ep *mrl_ep_core(const struct mrl_ep *ep, int i)
{
	return i < ep->nrails ? ep->rails[i].ep : ep->ctrl_ep;
}
void mrl_ep_progress(struct mrl_ep *ep);
int mrl_ep_setopt(fid_t fid, int level, int name, const void *val,
		  size_t len);
int mrl_ep_getopt(fid_t fid, int level, int name, void *val, size_t *len);
/* Progress as a lean CQ's poll drives it (struct mrl_lease). */
void mrl_ep_lease_offer(struct mrl_ep *ep);
void mrl_ep_progress_found(struct mrl_ep *ep, struct mrl_ep_rail *rail,
			   struct fi_cq_tagged_entry *e, fi_addr_t *src,
			   ssize_t n);
void mrl_ep_lease_give_back(struct mrl_ep *ep);

/* Before any call on the endpoint and any progress: see struct mrl_lease. */
static inline void mrl_ep_lease_end(struct mrl_ep *ep)
{
	if (__builtin_expect(ep->leased, 0))
		mrl_ep_lease_give_back(ep);
}
void mrl_ep_read_rail0_soon(struct mrl_ep *ep);
void mrl_ep_report_err(struct mrl_ep *ep, struct mrl_cq *cq, void *context,
		       uint64_t flags, int err, int prov_errno, uint64_t data);
int mrl_msg_init(struct mrl_ep *ep, size_t n);
void mrl_msg_fini(struct mrl_ep *ep);
struct mrl_msg_req *mrl_msg_req_get(struct mrl_ep *ep);
void mrl_msg_req_put(struct mrl_ep *ep, struct mrl_msg_req *req);
struct mrl_msg_req *mrl_msg_req_start(struct mrl_ep *ep, void *context,
				      uint64_t flags, uint64_t kind, size_t len,
				      uint64_t *core_flags);
bool mrl_inject_fits(const struct mrl_ep *ep, size_t len);
int mrl_fence_progress(struct mrl_ep *ep, struct mrl_peer *peer);
ssize_t mrl_inject_posted(struct mrl_ep *ep, struct mrl_cntr *cntr,
			  ssize_t ret);
ssize_t mrl_msg_req_posted(struct mrl_ep *ep, struct mrl_msg_req *req,
			   ssize_t ret);
void mrl_msg_complete(struct mrl_ep *ep, struct mrl_msg_req *req,
		      const struct fi_cq_tagged_entry *comp, fi_addr_t src,
		      int err, const struct fi_cq_err_entry *err_entry);
void mrl_remote_event(struct mrl_ep *ep, const struct fi_cq_tagged_entry *e,
		      fi_addr_t src);

extern struct fi_ops_rma mrl_rma_ops;
extern struct fi_ops_msg mrl_msg_ops;
extern struct fi_ops_tagged mrl_tagged_ops;
int mrl_rma_init(struct mrl_ep *ep);
void mrl_rma_fini(struct mrl_ep *ep);
void mrl_rma_tx_flags_set(struct mrl_ep *ep, uint64_t flags);
void mrl_rma_sched_init(struct mrl_ep *ep);
int mrl_rma_post_chunk(void *owner, struct mrl_chunk *chunk);
int mrl_rail0_target(struct mrl_ep *ep, fi_addr_t dest, uint64_t key,
		     fi_addr_t *addr, uint64_t *key0);
extern struct fi_ops_atomic mrl_atomic_ops;
int mrl_query_atomic(struct fid_domain *domain, enum fi_datatype datatype,
		     enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags);
bool mrl_rma_park(struct mrl_ep *ep, struct mrl_op *op);
void mrl_rma_parked_tick(struct mrl_ep *ep);
void mrl_rma_keys_learned(struct mrl_ep *ep, struct mrl_peer *peer,
			  const struct mrl_key_entry *entry);
/* A writedata's bytes landed: its WRITE_DATA goes (or waits for a buffer) */
void mrl_rma_send_write_data(struct mrl_ep *ep, struct mrl_rma_req *req);
void mrl_rma_write_data_done(struct mrl_ep *ep, struct mrl_rma_req *req,
			     int err);
void mrl_rma_write_data_waiting(struct mrl_ep *ep);
/* A scatter-gather op's piece completed: the op does once every piece did */
void mrl_rma_piece_done(struct mrl_ep *ep, struct mrl_rma_req *req, int err);

/* ---- the striped message path (mrl_msg.h) -------------------------------- */

bool mrl_msg_striped_wanted(const struct mrl_domain *dom);
int mrl_pkt_init(struct mrl_ep *ep);
void mrl_pkt_fini(struct mrl_ep *ep);
void mrl_pkt_completed(struct mrl_ep *ep, struct mrl_pkt_buf *buf, size_t len,
		       fi_addr_t core_src, int err);
void mrl_pkt_progress(struct mrl_ep *ep);
/* Packets refused for now, segments to go or ACKs due: progress's work. */
static inline bool mrl_pkt_work_due(const struct mrl_ep *ep)
{
	return ep->msg_striped && (ep->pkt_backlog || ep->msg_sending.next != &ep->msg_sending ||
	       ep->msg_acks.next != &ep->msg_acks);
}
ssize_t mrl_eager_cancel(struct mrl_ep *ep, void *context);
void mrl_pkt_tick(struct mrl_ep *ep);
void mrl_pkt_rail_down(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
void mrl_pkt_for_each_busy_peer(struct mrl_ep *ep, int rail,
				bool (*fn)(struct mrl_peer *, void *),
				void *arg);

/* ---- control channel ------------------------------------------------------ */

int mrl_ctrl_init(struct mrl_ep *ep);
uint64_t mrl_ctrl_tag_of(const struct mrl_ep *ep, const void *addr, int rail);
void mrl_ctrl_forget_sends(struct mrl_ep *ep);
void mrl_ctrl_fini(struct mrl_ep *ep);
/* What a received control message taught: a target's keys, for RMA. */
struct mrl_ctrl_learned {
	struct mrl_peer *peer;
	const struct mrl_key_entry *keys;
};

void mrl_ctrl_rx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, size_t len,
		 fi_addr_t src, int err, struct mrl_ctrl_learned *learned);
void mrl_ctrl_tx_done(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);
void mrl_ctrl_sent(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, int err);
int mrl_write_data_send(struct mrl_ep *ep, struct mrl_rma_req *req);
ssize_t mrl_write_data_inject(struct mrl_ep *ep, struct mrl_peer *peer,
			      const void *buf, size_t len, uint64_t data,
			      fi_addr_t dest, uint64_t addr, uint64_t key);
void mrl_connect_introduce(struct mrl_ep *ep, struct mrl_peer *peer);
ssize_t mrl_ctrl_bounce_write(struct mrl_ep *ep, const void *buf, size_t len,
			      fi_addr_t dest, uint64_t addr, uint64_t key);
void mrl_ctrl_bounce_done(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
			  int err);
void mrl_ctrl_progress(struct mrl_ep *ep);

int mrl_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
		  struct fid_poll **pollset);

static inline uint32_t mrl_rail_bit(int rail)
{
	return 1u << rail;
}

/* A flush of ep's to peer is in flight on rail (health watches it). */
static inline bool mrl_fence_flushing(const struct mrl_ep *ep,
				      const struct mrl_peer *peer, int rail)
{
	return peer->fence.owner == ep &&
	       (peer->fence.inflight & mrl_rail_bit(rail));
}

/* No flush to peer in flight: the AV may forget a learned peer. */
static inline bool mrl_fence_idle(const struct mrl_peer *peer)
{
	return !peer->fence.inflight;
}

void mrl_fence_forget_peer(struct mrl_peer *peer);

/* Another endpoint tracks this peer's rails for fences (mrl_fence.c). */
static inline bool mrl_fence_owned_elsewhere(const struct mrl_ep *ep,
					     const struct mrl_peer *peer)
{
	return peer->fence.owner && peer->fence.owner != ep;
}

/*
 * A write chunk without delivery completion went out on rail: a send to
 * peer flushes the rail first.  False where another endpoint tracks it.
 * Every small write on a rail but 0 comes here: inline.
 */
static inline void mrl_fence_mark(struct mrl_ep *ep, struct mrl_peer *peer,
				  int rail, uint64_t addr, uint64_t key)
{
	struct mrl_peer_fence *f = &peer->fence;

	f->owner = ep;
	f->dirty |= 1u << rail;
	peer->rail[rail].fence_addr = addr;
	peer->rail[rail].fence_key = key;
}

/*
 * Every write to peer: one that may be overwritten by bytes of a failed
 * rail landing late taints the next send to the peer (mrl_fence.c).
 */
static inline void mrl_fence_note_write(struct mrl_peer *peer)
{
	const struct mrl_peer_fence *f = &peer->fence;

	if (__builtin_expect(f->lost | f->stale, 0))
		peer->fence.tainted = true;
}

static inline bool mrl_fence_write_posted(struct mrl_ep *ep,
					  struct mrl_peer *peer, int rail,
					  uint64_t addr, uint64_t key)
{
	if (mrl_fence_owned_elsewhere(ep, peer))
		return false;
	mrl_fence_mark(ep, peer, rail, addr, key);
	return true;
}
int mrl_fence_before_send(struct mrl_ep *ep, struct mrl_peer *peer);
void mrl_fence_settled(struct mrl_peer *peer, int rail);
void mrl_fence_done(struct mrl_ep *ep, struct mrl_fence *fence, int err);
void mrl_fence_lost(struct mrl_peer *peer, int rail, bool may_land);
ssize_t mrl_post_zero_rma(struct mrl_ep *ep, int rail, fi_addr_t dest,
			  struct mrl_req_hdr *ctx, uint64_t addr, uint64_t key,
			  bool read);
ssize_t mrl_fence_post_zero(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail, struct mrl_fence *req,
			    enum mrl_req_kind kind, uint64_t addr,
			    uint64_t key, bool read);
void mrl_fence_rail_down(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
void mrl_fence_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer);
int mrl_connect_hello(struct mrl_ep *ep, struct mrl_peer *peer);
void mrl_connect_hello_partial(struct mrl_ep *ep);
void mrl_connect_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
			  uint32_t rails);
void mrl_connect_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer);
/* The AV gave the peer new rails: they have not been greeted. */
static inline void mrl_connect_rails_added(struct mrl_peer *peer)
{
	peer->rails_up &= 1u;
}
uint32_t mrl_connect_open_rails(struct mrl_ep *ep, struct mrl_peer *peer,
				uint32_t rails);
void mrl_rma_widen_pending(struct mrl_ep *ep, struct mrl_peer *peer);
/* What others may do to the fast path's hint (the key entry and rails the
 * peer's last small op used): drop it, where the peer's rails change. */
static inline void mrl_rma_forget_hint(struct mrl_peer *peer)
{
	peer->key_hint = NULL;
}
bool mrl_connect_await_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails);
void mrl_keys_forget_peer(struct mrl_peer *peer);
const struct mrl_key_entry *mrl_keys_lookup(struct mrl_ep *ep,
					    struct mrl_peer *peer,
					    uint64_t key);
bool mrl_keys_awaited(const struct mrl_ep *ep,
		      const struct mrl_peer *peer,
		      const struct mrl_key_entry *entry);
void mrl_peer_free(struct mrl_peer *peer);

/* ---- rail and peer health (mrl_health.c) ------------------------------- */

void mrl_health_chunk_failed(struct mrl_ep *ep, struct mrl_chunk *chunk,
			     int err);
void mrl_health_refused(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
void mrl_health_answered(struct mrl_peer *peer);

/* A post to peer on rail passed: the rail's refusal streak ends. */
static inline void mrl_health_posted(struct mrl_peer *peer, int rail)
{
	peer->refused_rails &= ~(1u << rail);
}
bool mrl_health_post_failed(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail, int err);
void mrl_health_note_target(struct mrl_peer *peer, int nrails,
			    const uint64_t *keys, uint64_t addr, bool read);
void mrl_health_probe_done(struct mrl_ep *ep, struct mrl_fence *probe,
			   int err);
void mrl_health_tick(struct mrl_ep *ep);
/* mrl_reset.c: the connections reset (0 where the core has no sockets);
 * holding: only those holding bytes the peer's kernel has not
 * acknowledged for quiet_ms (else also those that heard nothing) */
int mrl_reset_peer_rail(struct mrl_ep *ep, const struct mrl_peer *peer,
			int rail, unsigned quiet_ms, bool holding);
bool mrl_health_acks_stalled(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails);
void mrl_health_pkt_probe_done(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail, int err);
ssize_t mrl_pkt_probe(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
void mrl_health_reset_asked(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail);
void mrl_connect_reset_rail(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
struct mrl_peer *mrl_write_data_flushing_peer(struct mrl_ep *ep, int rail,
					      bool waited, size_t *iter);
void mrl_write_data_flushed(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
			    int err);
int mrl_rma_rail_key(struct mrl_ep *ep, struct mrl_peer *peer, uint64_t key,
		     int rail, uint64_t *rail_key);
uint64_t mrl_rma_req_key(struct mrl_rma_req *req);
void mrl_fence_conn_reset(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
void mrl_fence_data_lost(struct mrl_ep *ep, struct mrl_peer *peer, int rail);
int mrl_fence_lost_since(struct mrl_ep *ep, const struct mrl_peer *peer);
void mrl_write_data_conn_reset(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail);
void mrl_health_fail_unreachable(struct mrl_ep *ep);
int mrl_health_rail_state(const struct mrl_ep *ep, int rail);
void mrl_health_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer);
void mrl_health_forget_peer(struct mrl_peer *peer);

/* ---- locality (mrl_locality.c) ------------------------------------------ */

struct mrl_topo *mrl_locality_topo(void);
void mrl_locality_fini(void);
const char *mrl_rail_topo_name(const char *rail);
void mrl_rail_core_name(const char *rail, char *out, size_t len);
int mrl_locality_rails(char *const *rails, int n, struct mrl_loc *locs);
uint32_t mrl_locality_mem_mask(const struct mrl_loc *locs, int n, int known,
			       enum fi_hmem_iface iface, int cuda_dev,
			       const void *buf, size_t len);
uint32_t mrl_locality_process_mask(const struct mrl_loc *locs, int n,
				   int known, bool gpu_app, char *why,
				   size_t len);

/* ---- helpers ----------------------------------------------------------------- */

static inline struct mrl_cntr *mrl_ep_local_cntr(struct mrl_ep *ep,
						 uint64_t flags)
{
	if (flags & FI_RECV)
		return ep->cntr_recv;
	if (flags & FI_SEND)
		return ep->cntr_send;
	if (flags & FI_READ)
		return ep->cntr_read;
	if (flags & FI_WRITE)
		return ep->cntr_write;
	return NULL;
}

/* An RMA op's completion flags, by its kind. */
static inline uint64_t mrl_rma_comp_flags(enum mrl_op_kind kind)
{
	static const uint64_t flags[] = {
		[MRL_OP_WRITE] = FI_RMA | FI_WRITE,
		[MRL_OP_READ] = FI_RMA | FI_READ,
	};

	return flags[kind];
}

/* The endpoint's free RMA requests (rma_free, or a copy of its top). */
MRL_DECLARE_FREE_STACK(struct mrl_rma_req, mrl_rma_req_stack)

/*
 * A run of RMA ops completing straight into the user's read (progress's
 * fast path, mrl_progress.c): where the next entry goes and in what
 * format, and the free requests' top, kept here (a register) until
 * mrl_rma_run_end.  Only whole ops under rma_cq_only come this way, with
 * room checked in the reader's buffer: see mrl_rma_complete.
 */
struct mrl_rma_run {
	char *out;
	enum fi_cq_format format;
	size_t size;
	struct mrl_rma_req *free_reqs;
};

static inline void mrl_rma_run_begin(struct mrl_ep *ep, struct mrl_cq *cq,
				     struct mrl_rma_run *run,
				     enum fi_cq_format format, size_t size)
{
	run->out = mrl_cq_direct_at(cq);
	run->format = format;
	run->size = size;
	run->free_reqs = ep->rma_free;
}

/* The run's n entries handed to the reader, its requests back to the pool. */
static inline void mrl_rma_run_end(struct mrl_ep *ep, struct mrl_cq *cq,
				   const struct mrl_rma_run *run, size_t n)
{
	ep->rma_free = run->free_reqs;
	mrl_cq_direct_commit(cq, run->out, n);
}

/*
 * An RMA op's one completion: the user's counter and CQ entry, this one
 * honouring FI_SELECTIVE_COMPLETION (an error's not), then its request
 * back to the pool.  Domain locked (its CQ write asserts it).  Every op
 * comes here: through the engine's op_done (mrl_rma_done), or in a run
 * (run set).  A run's op is a whole one (no writedata, no pieces) of an
 * endpoint with rma_cq_only (no counter, every op an entry), fine, and
 * the run's buffer has room: the rule below, with those answers known.
 */
static inline __attribute__((always_inline))
void mrl_rma_complete(struct mrl_ep *ep, struct mrl_op *op, int err,
		      struct mrl_rma_run *run)
{
	struct mrl_rma_req *req = mrl_container_of(op, struct mrl_rma_req, op);
	bool read = op->kind == MRL_OP_READ;
	uint64_t flags = mrl_rma_comp_flags(op->kind);

	if (run) {
		assert(ep->rma_cq_only && !err && !req->write_data &&
		       !req->parent);
		mrl_cq_entry_fill(run->out, run->format, op->context, flags,
				  op->len, NULL, 0, 0);
		run->out += run->size;
		mrl_rma_req_stack_push(&run->free_reqs, req);
		return;
	}
	if (__builtin_expect(req->write_data || req->parent, 0)) {
		if (req->parent) {
			mrl_rma_piece_done(ep, req, err);
			return;
		}
		req->write_data = false;
		if (!err) {
			mrl_rma_send_write_data(ep, req);	/* completes it later */
			return;
		}
	}
	if (err) {
		mrl_ep_report_err(ep, ep->tx_cq, op->context, flags, err,
				  req->prov_errno, 0);
	} else {
		if (!ep->rma_cq_only)
			mrl_cntr_inc(read ? ep->cntr_read : ep->cntr_write);
		if (ep->rma_cq_only ||
		    (ep->tx_cq &&
		     (!(ep->tx_cq_flags & FI_SELECTIVE_COMPLETION) ||
		      (op->flags & FI_COMPLETION))))
			mrl_cq_write(ep->tx_cq, op->context, flags, op->len,
				     NULL, 0, 0, FI_ADDR_NOTAVAIL);
	}
	req->prov_errno = 0;	/* a chunk may have failed, and gone again */
	mrl_rma_req_stack_push(&ep->rma_free, req);
}

/* The engine's op_done: inline in progress, errors out of line. */
static inline __attribute__((always_inline))
void mrl_rma_done(void *owner, struct mrl_op *op, int err)
{
	mrl_rma_complete(owner, op, err, NULL);
}

/* A 64-bit key's bits mixed for a power-of-two table (keys may be
 * addresses or counters): registrations and a peer's keys are found so. */
static inline uint64_t mrl_mix64(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	return key ^ (key >> 33);
}

static inline uint32_t mrl_rail_mask(int nrails)
{
	return nrails >= 32 ? ~0u : (1u << nrails) - 1;
}

/* The one clock of the provider: monotonic, in ns. */
static inline uint64_t mrl_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Every rail to the peer out of service (mrl_health.c). */
static inline bool mrl_peer_unreachable(const struct mrl_peer *peer)
{
	uint32_t all = mrl_rail_mask(peer->nrails);

	return (peer->rails_down & all) == all;
}

/* A fence, probe or control send went to rail's core: progress reads it. */
static inline void mrl_nonchunk_posted(struct mrl_ep *ep, int rail)
{
	if (!ep->rails[rail].nonchunk++)
		ep->nonchunk_busy |= 1u << rail;
}

static inline void mrl_nonchunk_done(struct mrl_ep *ep, int rail)
{
	if (!--ep->rails[rail].nonchunk)
		ep->nonchunk_busy &= ~(1u << rail);
}

/*
 * The domain's lock: one guards every object under the domain.  Debug builds (--enable-debug) record who holds it, so
 * that every function whose rule is "Domain locked" asserts it
 * (mrl_assert_locked); under FI_THREAD_DOMAIN the application serialises
 * the calls and there is no lock to hold.
 */
static inline void mrl_lock(struct mrl_domain *d)
{
	if (!d->locking)
		return;
	pthread_mutex_lock(&d->lock);
#ifdef MRL_DEBUG
	d->lock_held = true;
	d->lock_owner = pthread_self();
#endif
}

#ifdef MRL_DEBUG
static inline bool mrl_locked_here(const struct mrl_domain *d)
{
	return !d->locking ||
	       (d->lock_held && pthread_equal(d->lock_owner, pthread_self()));
}
#define mrl_assert_locked(d)	assert(mrl_locked_here(d))
#else
#define mrl_assert_locked(d)	do { (void) (d); } while (0)
#endif

static inline void mrl_unlock(struct mrl_domain *d)
{
	if (!d->locking)
		return;
	mrl_assert_locked(d);
#ifdef MRL_DEBUG
	d->lock_held = false;
#endif
	pthread_mutex_unlock(&d->lock);
}

/* A call on ep begins: the domain's lock, and the lease ends. */
static inline void mrl_ep_lock(struct mrl_ep *ep)
{
	mrl_lock(ep->domain);
	mrl_ep_lease_end(ep);
}

/*
 * Every object opened on a domain holds it: fi_close of a domain with
 * objects still open is -FI_EBUSY, as libfabric's own providers answer.
 * Opens and closes may race under FI_THREAD_SAFE, hence atomics.
 */
static inline void mrl_domain_hold(struct mrl_domain *d)
{
	__atomic_add_fetch(&d->children, 1, __ATOMIC_RELAXED);
}

static inline void mrl_domain_release(struct mrl_domain *d)
{
	__atomic_sub_fetch(&d->children, 1, __ATOMIC_RELAXED);
}

size_t mrl_iov_len(const struct iovec *iov, size_t count);
void mrl_iov_copy(const struct iovec *iov, size_t count, size_t offset,
		  void *buf, size_t len, bool to_iov);
int mrl_iov_copy_iface(enum fi_hmem_iface iface, const struct iovec *iov,
		       size_t count, size_t offset, void *buf, size_t len,
		       bool to_iov);
bool mrl_desc_any_device(void **desc, size_t count);
enum fi_hmem_iface mrl_desc_iface(void **desc, size_t count);

#endif /* MRL_H */
