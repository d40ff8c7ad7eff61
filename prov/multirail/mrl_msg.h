/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The striped message path (docs/messages.md): what its
 * files call of each other.  mrl_msg.c takes the user's calls and chooses
 * the path; mrl_pkt.c owns the packet buffers on every rail, the per-peer
 * connections (sequence numbers, ACKs) and what arrives; mrl_eager.c sends
 * messages as eager packets and segments and places what arrives in the
 * user's receives (matching through mrl_match.c).  Domain locked, every
 * function here.
 */
#ifndef MRL_MSG_H
#define MRL_MSG_H

#include "mrl.h"
#include "mrl_match.h"
#include "mrl_order.h"

/* A packet's bytes: its headers and the most one carries. */
#define MRL_PKT_BUF_SIZE	(sizeof(struct mrl_pkt_hdr) + \
				 sizeof(struct mrl_pkt_seg) + MRL_PKT_EAGER_MAX)
/* receive buffers posted on each rail; packet buffers for sending */
#define MRL_PKT_RX_PER_RAIL	64
#define MRL_PKT_TX_COUNT	512
/* mrl_eager_sent's err for a packet that did not go, sent again instead */
#define MRL_PKT_VOID		1
/* packet buffers only ACKs may take: an ACK frees the sender's buffers */
#define MRL_PKT_ACK_RESERVE	16
/* sends in progress per endpoint (beyond: -FI_EAGAIN) */
#define MRL_MSG_SENDS		1024
/* connections an endpoint keeps (peers it sent to or heard from) */
#define MRL_CONN_BUCKETS	256
#define MRL_CONN_MAX		65536

/*
 * One end of a pair of endpoints, found by the peer's id (its rail-0
 * address hashed, as every packet's header carries it): the numbers of our
 * messages to it and of its messages to us.  Kept for the endpoint's life,
 * not the AV entry's: a peer removed and inserted again goes on counting.
 */
struct mrl_conn {
	struct mrl_conn *next;		/* in its bucket */
	uint64_t id;
	struct mrl_order_tx tx;
	struct mrl_order_rx rx;
	struct mrl_list partial;	/* its messages not whole yet, and
					 * the early ones held */
	/* the same by number: a sender keeps its messages not yet
	 * acknowledged within MRL_ORDER_WINDOW, and the ACK stops at the
	 * first one not whole, so no two partial ones share a slot */
	struct mrl_rmsg *partial_at[MRL_ORDER_WINDOW];
	struct mrl_list unacked;	/* our sends it has not acknowledged,
					 * in their order */
	struct mrl_list ack_link;	/* in ep->msg_acks or msg_acks_later */
	enum { MRL_ACK_NONE, MRL_ACK_LATER, MRL_ACK_NOW } ack_state;
	uint16_t rail_out[MRL_MAX_RAILS];	/* our packets to it in
						 * flight, by rail */
	uint64_t tag[MRL_MAX_RAILS];	/* its packet tag on each rail
					 * (0: not computed yet) */
	int heard_rail;			/* its latest data packet's: our
					 * ACKs go there */
	/* the ACK watch (mrl_pkt_watch_acks): tx.acked when last seen to
	 * move, and since when */
	uint32_t ack_seen;
	uint64_t ack_wait_ns;
};

struct mrl_pkt_buf {
	struct mrl_req_hdr hdr;		/* MRL_REQ_PKT_RX or _TX: first */
	struct mrl_pkt_buf *next_free;
	struct mrl_send *send;		/* tx: the send it carries a part of
					 * (NULL: an inject's, an ACK) */
	struct mrl_conn *conn;		/* tx: where it goes */
	bool in_core;			/* tx: posted, not completed */
	bool probe;			/* tx: a health probe (mrl_pkt_probe) */
	int rail;
	size_t len;
	uint8_t data[MRL_PKT_BUF_SIZE];
};

MRL_DECLARE_FREE_STACK(struct mrl_pkt_buf, mrl_pkt_buf_stack)

/*
 * A user's send, from its post until the peer acknowledged it: a rail that
 * fails meanwhile has its packets sent again on the others.  An eager
 * message's packet stays as it was posted (the user's buffer is the
 * user's again once the send completes); a longer one is read again from
 * the user's buffer, whose send completes at the peer's ACK.
 */
struct mrl_send {
	struct mrl_list link;		/* ep->msg_sending, while packets
					 * are still to go (queued) */
	struct mrl_list ulink;		/* its conn's unacked */
	struct mrl_send *next_free;
	void *context;
	uint64_t flags;			/* the user's and FI_SEND|FI_MSG... */
	void *copy;			/* the bytes, taken at the send: an
					 * inject's over the eager size, and
					 * device memory's */
	struct mrl_conn *conn;
	fi_addr_t dest;			/* the user's */
	struct iovec iov[MRL_IOV_LIMIT];
	size_t count;
	size_t len, sent;		/* bytes in packets posted so far */
	uint64_t tag, data;
	uint32_t seq;
	uint16_t pkt_flags;
	int out;			/* packets posted, not completed */
	int err;
	struct mrl_pkt_buf *eager;	/* an eager message's packet */
	uint32_t rails;			/* the rails its packets went on */
	bool queued;			/* on ep->msg_sending */
	bool posted_all;		/* every packet went (this round) */
	bool reported;			/* the user's completion is written */
	bool acked;
};

MRL_DECLARE_FREE_STACK(struct mrl_send, mrl_send_stack)

/* A user's receive, posted or matched. */
struct mrl_recv {
	struct mrl_match_recv m;
	void *context;
	uint64_t flags;			/* the user's and FI_RECV|FI_MSG... */
	struct iovec iov[MRL_IOV_LIMIT];
	size_t count;
	enum fi_hmem_iface iface;	/* device memory: placed by its copy */
	int placing;			/* messages matched, not whole yet */
	bool released;			/* off its queue: its last message
					 * completes it */
	bool cancelled;
};

enum mrl_rmsg_state {
	MRL_RMSG_HELD,			/* early: waits for those before */
	MRL_RMSG_UNEXPECTED,		/* in order, no receive yet */
	MRL_RMSG_MATCHED,
	MRL_RMSG_DISCARDED,		/* FI_DISCARD: its bytes are dropped */
};

/* A message arriving, from its first packet until it is placed whole. */
struct mrl_rmsg {
	struct mrl_match_msg m;		/* first: the queue's link */
	struct mrl_list plink;		/* its conn's partial, until whole */
	struct mrl_conn *conn;
	uint32_t seq;
	uint16_t pkt_flags;
	enum mrl_rmsg_state state;
	uint64_t data;
	size_t got;			/* bytes arrived */
	uint8_t *segs;			/* segments arrived: one bit each */
	uint8_t *store;			/* before it is matched, and until
					 * whole for a device receive */
	struct mrl_recv *recv;		/* matched */
	struct mrl_match_take take;
	int err;			/* FI_E*: its receive fails */
};

/* ---- packets and connections (mrl_pkt.c) -------------------------------- */

uint64_t mrl_pkt_id(const void *addr);
struct mrl_conn *mrl_conn_get(struct mrl_ep *ep, uint64_t id, bool create);
struct mrl_peer *mrl_conn_peer(struct mrl_ep *ep, const struct mrl_conn *conn);
struct mrl_pkt_buf *mrl_pkt_take_tx(struct mrl_ep *ep, bool for_ack);
void mrl_pkt_put_tx(struct mrl_ep *ep, struct mrl_pkt_buf *buf);
void mrl_pkt_fill_hdr(struct mrl_ep *ep, struct mrl_pkt_buf *buf, int type,
		      uint16_t flags, uint32_t seq, uint64_t tag,
		      uint64_t data, uint64_t len);
int mrl_pkt_rail(struct mrl_ep *ep, struct mrl_peer *peer);
ssize_t mrl_pkt_post(struct mrl_ep *ep, struct mrl_peer *peer,
		     struct mrl_pkt_buf *buf, int rail);
void mrl_pkt_ack_due(struct mrl_ep *ep, struct mrl_conn *conn, bool now);
void mrl_pkt_backlog_add(struct mrl_ep *ep, struct mrl_pkt_buf *buf);
bool mrl_pkt_path_failed(struct mrl_ep *ep, struct mrl_conn *conn, int rail,
			 int err);

/* ---- eager packets and segments (mrl_eager.c) --------------------------- */

void mrl_eager_push(struct mrl_ep *ep);
void mrl_eager_sent(struct mrl_ep *ep, struct mrl_pkt_buf *buf, int err);
void mrl_eager_arrived(struct mrl_ep *ep, struct mrl_conn *conn,
		       const struct mrl_pkt_hdr *hdr, const uint8_t *payload,
		       size_t offset, size_t len);
struct mrl_recv *mrl_recv_new(struct mrl_ep *ep);
ssize_t mrl_eager_recv(struct mrl_ep *ep, struct mrl_recv *recv);
ssize_t mrl_eager_send(struct mrl_ep *ep, struct mrl_peer *peer,
		       struct mrl_send *s, bool inject,
		       enum fi_hmem_iface iface);
void mrl_eager_acked(struct mrl_ep *ep, struct mrl_conn *conn, uint32_t next);
void mrl_eager_resend(struct mrl_ep *ep, struct mrl_conn *conn, int rail);
void mrl_eager_nudge(struct mrl_ep *ep, struct mrl_conn *conn,
		     struct mrl_peer *peer);
void mrl_eager_fail(struct mrl_ep *ep, struct mrl_send *s, int err);
void mrl_eager_fini(struct mrl_ep *ep);

#endif /* MRL_MSG_H */
