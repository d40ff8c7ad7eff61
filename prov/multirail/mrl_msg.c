/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Messages and tagged messages pass through on rail 0, so applications that
 * mix FI_MSG/FI_TAGGED with RMA keep one ordered channel for them.  Tags
 * with MRL_CTRL_TAG set belong to our control channel: user sends may not
 * use that bit, and user receives always match it as 0.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "mrl_msg.h"

/* ---- message request pool ---------------------------------------------- */

struct mrl_msg_req *mrl_msg_req_get(struct mrl_ep *ep)
{
	struct mrl_msg_req *req = mrl_msg_req_stack_pop(&ep->msg_free);

	if (req) {
		req->hdr.kind = MRL_REQ_MSG;
		mrl_nonchunk_posted(ep, 0);	/* progress reads rail 0 */
	}
	return req;
}

void mrl_msg_req_put(struct mrl_ep *ep, struct mrl_msg_req *req)
{
	if (req->copy) {
		if (req->copy_mr)
			fi_close(&req->copy_mr->fid);
		free(req->copy);
		req->copy = NULL;
		req->copy_mr = NULL;
	}
	req->hdr.kind = 0;
	mrl_msg_req_stack_push(&ep->msg_free, req);
	mrl_nonchunk_done(ep, 0);
}

/* n requests: enough for every send and receive the core can hold. */
int mrl_msg_init(struct mrl_ep *ep, size_t n)
{
	size_t i;

	ep->msg_reqs = calloc(n, sizeof(*ep->msg_reqs));
	if (!ep->msg_reqs)
		return -FI_ENOMEM;
	ep->msg_pool_size = n;
	for (i = n; i-- > 0;)	/* free, not given back: none was out */
		mrl_msg_req_stack_push(&ep->msg_free, &ep->msg_reqs[i]);
	return 0;
}

/* After the core endpoints are closed: sends still out free their copies. */
void mrl_msg_fini(struct mrl_ep *ep)
{
	size_t i;

	for (i = 0; ep->msg_reqs && i < ep->msg_pool_size; i++) {
		if (ep->msg_reqs[i].copy_mr)
			fi_close(&ep->msg_reqs[i].copy_mr->fid);
		free(ep->msg_reqs[i].copy);
	}
	free(ep->msg_reqs);
	ep->msg_reqs = NULL;
}

struct mrl_msg_args {
	const struct iovec *iov;
	void **desc;
	size_t count;
	fi_addr_t addr;
	uint64_t tag, ignore, data, flags;
	void *context;
	bool tagged, tx;
};

static int mrl_check_args(struct mrl_ep *ep, const struct mrl_msg_args *a)
{
	size_t i, limit = a->tx ? ep->tx_iov_limit : ep->rx_iov_limit;

	if (a->count > limit || (a->count && !a->iov)) {
		MRL_WARN(FI_LOG_EP_DATA, "%zu iovs, at most %zu\n", a->count,
			 limit);
		return -FI_EINVAL;
	}
	if (a->tagged && ep->domain->ctrl_own_ep) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "tagged message: the core has no "
			      "FI_TAGGED\n");
		return -FI_ENOSYS;
	}
	/* a receive with it would take our control messages */
	if (a->tagged && (a->tag & MRL_CTRL_TAG)) {
		MRL_WARN(FI_LOG_EP_DATA, "tag bit 63 is reserved\n");
		return -FI_EINVAL;
	}
	/* the striped path sends and receives through buffers of its own */
	if (ep->domain->core_mr_local && !(a->flags & FI_INJECT) &&
	    !ep->msg_striped) {
		for (i = 0; i < a->count; i++) {
			if (a->iov[i].iov_len && (!a->desc || !a->desc[i])) {
				MRL_WARN(FI_LOG_EP_DATA, "FI_MR_LOCAL: iov %zu "
					 "has no descriptor\n", i);
				return -FI_EINVAL;
			}
		}
	}
	if (!ep->enabled) {
		MRL_WARN(FI_LOG_EP_DATA, "endpoint not enabled\n");
		return -FI_EOPBADSTATE;
	}
	return 0;
}

static int mrl_core_addr(struct mrl_ep *ep, fi_addr_t addr, bool tx,
			 fi_addr_t *out, struct mrl_peer **peer_out)
{
	struct mrl_peer *peer;

	/* without FI_DIRECTED_RECV a receive's address is ignored */
	if (!tx && (addr == FI_ADDR_UNSPEC ||
		    !(ep->info->caps & FI_DIRECTED_RECV))) {
		*out = FI_ADDR_UNSPEC;
		return 0;
	}
	peer = mrl_av_peer(ep->av, addr);
	if (!peer) {
		MRL_WARN(FI_LOG_EP_DATA, "fi_addr %lu not in the AV\n",
			 (unsigned long) addr);
		return -FI_EINVAL;
	}
	*out = peer->rail[0].core_addr;
	if (peer_out)
		*peer_out = peer;
	if (tx && ep->ctrl_ep)
		mrl_connect_introduce(ep, peer);
	return 0;
}

/*
 * A request for one op passed through whole on rail 0 (a message or an
 * atomic), completed by mrl_msg_complete: NULL, after progressing, when
 * none is free.  flags are the user's and the op's defaults, kind the
 * op's class (FI_SEND|FI_MSG, FI_ATOMIC|FI_READ...); *core_flags is what
 * to post with.
 */
struct mrl_msg_req *mrl_msg_req_start(struct mrl_ep *ep, void *context,
				      uint64_t flags, uint64_t kind, size_t len,
				      uint64_t *core_flags)
{
	struct mrl_msg_req *req = mrl_msg_req_get(ep);

	if (!req) {
		mrl_ep_progress(ep);
		return NULL;
	}
	req->context = context;
	req->flags = flags | kind;
	req->len = len;
	/* We need every core completion to release the request. */
	*core_flags = (flags | FI_COMPLETION) & ~FI_INJECT_COMPLETE;
	return req;
}

/* After the core post: a refused op gives its request back. */
ssize_t mrl_msg_req_posted(struct mrl_ep *ep, struct mrl_msg_req *req,
			   ssize_t ret)
{
	if (ret)
		mrl_msg_req_put(ep, req);
	if (ret == -FI_EAGAIN)
		mrl_ep_progress(ep);
	return ret;
}

/*
 * A send that writes before it may not have landed for (mrl_fence.c): it
 * completes with -FI_EIO and nothing goes.  Domain locked.
 */
static ssize_t mrl_send_lost(struct mrl_ep *ep, const struct mrl_msg_args *a)
{
	mrl_assert_locked(ep->domain);
	uint64_t kind = FI_SEND | (a->tagged ? FI_TAGGED : FI_MSG);

	mrl_cntr_inc_err(mrl_ep_local_cntr(ep, kind));
	if (ep->tx_cq)
		return mrl_cq_write_err(ep->tx_cq, a->context, kind, -FI_EIO,
					0, a->data, a->tag);
	return 0;
}

/*
 * A send of more iovs than the core takes goes from one copy of them, made
 * here (host memory only; registered for a core that needs it) and freed
 * with the request.  *a then names the copy.
 */
static int mrl_send_from_copy(struct mrl_ep *ep, struct mrl_msg_req *req,
			      struct mrl_msg_args *a, struct iovec *iov,
			      void **desc)
{
	size_t len = mrl_iov_len(a->iov, a->count);
	int ret;

	if (mrl_desc_any_device(a->desc, a->count)) {
		MRL_WARN(FI_LOG_EP_DATA, "a send of %zu iovs of device memory: "
			 "the core takes %zu\n", a->count, ep->msg_iov_limit);
		return -FI_EINVAL;
	}
	req->copy = malloc(len ? len : 1);
	if (!req->copy)
		return -FI_ENOMEM;
	mrl_iov_copy(a->iov, a->count, 0, req->copy, len, false);
	if (ep->domain->core_mr_local) {
		ret = fi_mr_reg(ep->domain->rails[0].domain, req->copy,
				len ? len : 1, FI_SEND, 0, 0, 0, &req->copy_mr,
				NULL);
		if (ret) {
			MRL_WARN(FI_LOG_EP_DATA, "a send's copy: fi_mr_reg: "
				 "%s\n", fi_strerror(-ret));
			return ret;
		}
	}
	iov->iov_base = req->copy;
	iov->iov_len = len;
	desc[0] = req->copy_mr ? fi_mr_desc(req->copy_mr) : NULL;
	a->iov = iov;
	a->desc = NULL;
	a->count = 1;
	return 0;
}

/* ---- the striped path (mrl_pkt.c, mrl_eager.c) ------------------------- */

/*
 * Host memory, or CUDA's, which goes through one copy at each end (the
 * cores carry our packet buffers, never the user's): -FI_EOPNOTSUPP for
 * another device's.
 */
static int mrl_striped_iface(const struct mrl_msg_args *a,
			     enum fi_hmem_iface *iface)
{
	*iface = mrl_desc_iface(a->desc, a->count);
	if (*iface != FI_HMEM_SYSTEM && *iface != FI_HMEM_CUDA) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "device memory other than "
			      "CUDA's on the striped message path\n");
		return -FI_EOPNOTSUPP;
	}
	return 0;
}

/* Domain locked, a checked: a send (inject: the caller's bytes are its
 * own again on return, and no completion). */
static ssize_t mrl_striped_send(struct mrl_ep *ep, const struct mrl_msg_args *a,
				bool inject)
{
	struct mrl_peer *peer = mrl_av_peer(ep->av, a->addr);
	size_t len = mrl_iov_len(a->iov, a->count);
	enum fi_hmem_iface iface;
	struct mrl_conn *conn;
	struct mrl_send *s;
	ssize_t ret;

	if (!peer) {
		MRL_WARN(FI_LOG_EP_DATA, "fi_addr %lu not in the AV\n",
			 (unsigned long) a->addr);
		return -FI_EINVAL;
	}
	if (len > MRL_PKT_MEDIUM_MAX) {
		MRL_WARN(FI_LOG_EP_DATA, "a message of %zu bytes: at most "
			 "%llu\n", len, (unsigned long long) MRL_PKT_MEDIUM_MAX);
		return -FI_EMSGSIZE;
	}
	ret = mrl_striped_iface(a, &iface);
	if (ret)
		return ret;
	ret = mrl_fence_progress(ep, peer);
	if (ret == -FI_EIO && !inject)
		return mrl_send_lost(ep, a);
	if (ret)
		return ret;
	conn = mrl_conn_get(ep, mrl_av_peer_id(peer), true);
	if (!conn)
		return -FI_ENOMEM;
	s = mrl_send_stack_pop(&ep->msg_send_free);
	if (peer->partial || !s || !mrl_order_tx_open(&conn->tx)) {
		if (s)
			mrl_send_stack_push(&ep->msg_send_free, s);
		mrl_ep_progress(ep);
		return -FI_EAGAIN;
	}
	*s = (struct mrl_send) {
		.context = inject ? NULL : a->context,
		.flags = a->flags | ep->tx_op_flags | FI_SEND |
			 (a->tagged ? FI_TAGGED : FI_MSG) |
			 (inject ? FI_INJECT : 0),
		.conn = conn, .dest = a->addr, .count = a->count, .len = len,
		.tag = a->tag, .data = a->data,
		.pkt_flags = (a->tagged ? MRL_PKT_F_TAGGED : 0) |
			     (a->flags & FI_REMOTE_CQ_DATA ? MRL_PKT_F_DATA : 0),
	};
	memcpy(s->iov, a->iov, a->count * sizeof(*a->iov));
	ret = mrl_eager_send(ep, peer, s, inject || (a->flags & FI_INJECT),
			     iface);
	if (ret) {
		mrl_send_stack_push(&ep->msg_send_free, s);
		if (ret == -FI_EAGAIN)
			mrl_ep_progress(ep);
	} else if (inject) {
		mrl_cntr_inc(ep->cntr_send);
	}
	return ret;
}

/* Domain locked, a checked: a receive, matched by us. */
static ssize_t mrl_striped_recv(struct mrl_ep *ep, const struct mrl_msg_args *a)
{
	uint64_t flags = a->flags | ep->rx_op_flags | FI_RECV |
			 (a->tagged ? FI_TAGGED : FI_MSG);
	struct mrl_recv *r;
	size_t len = mrl_iov_len(a->iov, a->count);
	enum fi_hmem_iface iface;
	int ret;

	ret = mrl_striped_iface(a, &iface);
	if (ret)
		return ret;
	if (iface != FI_HMEM_SYSTEM && !a->tagged && (flags & FI_MULTI_RECV)) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "FI_MULTI_RECV into device "
			      "memory on the striped message path\n");
		return -FI_EOPNOTSUPP;
	}
	r = mrl_recv_new(ep);
	if (!r)
		return -FI_ENOMEM;
	r->iface = iface;
	r->context = a->context;
	r->flags = flags;
	r->count = a->count;
	memcpy(r->iov, a->iov, a->count * sizeof(*a->iov));
	r->m.src = a->addr != FI_ADDR_UNSPEC &&
		   (ep->info->caps & FI_DIRECTED_RECV) ? a->addr
						       : MRL_MATCH_ANY;
	r->m.tag = a->tagged ? a->tag : 0;
	r->m.ignore = a->tagged ? a->ignore : 0;
	r->m.size = r->m.left = len;
	r->m.context = a->context;
	r->m.multi = !a->tagged && (flags & FI_MULTI_RECV);
	r->m.min_left = ep->min_multi_recv;
	return mrl_eager_recv(ep, r);
}

static ssize_t mrl_msg_post(struct mrl_ep *ep, const struct mrl_msg_args *args)
{
	struct fid_ep *core = ep->rails[0].ep;
	struct mrl_msg_args copied = *args, *a = &copied;
	struct iovec copy_iov;
	void *desc[MRL_IOV_LIMIT];
	struct mrl_peer *peer = NULL;
	struct mrl_msg_req *req;
	fi_addr_t caddr;
	uint64_t flags;
	size_t i;
	ssize_t ret;

	mrl_ep_lock(ep);
	ret = mrl_check_args(ep, a);
	if (!ret && ep->msg_striped) {
		ret = a->tx ? mrl_striped_send(ep, a, false)
			    : mrl_striped_recv(ep, a);
		goto out;
	}
	if (!ret)
		ret = mrl_core_addr(ep, a->addr, a->tx, &caddr, &peer);
	if (!ret && a->tx)
		ret = mrl_fence_progress(ep, peer);
	if (ret == -FI_EIO) {
		ret = mrl_send_lost(ep, a);
		goto out;
	}
	if (ret)
		goto out;
	req = mrl_msg_req_start(
		ep, a->context,
		a->flags | (a->tx ? ep->tx_op_flags : ep->rx_op_flags),
		(a->tx ? FI_SEND : FI_RECV) | (a->tagged ? FI_TAGGED : FI_MSG),
		mrl_iov_len(a->iov, a->count), &flags);
	if (!req) {
		ret = -FI_EAGAIN;
		goto out;
	}
	if (a->count > ep->msg_iov_limit) {
		ret = mrl_send_from_copy(ep, req, a, &copy_iov, desc);
		if (ret) {
			mrl_msg_req_put(ep, req);
			goto out;
		}
	} else {
		for (i = 0; i < a->count; i++)
			desc[i] = mrl_desc_rail(a->desc ? a->desc[i] : NULL,
						0);
	}

	if (a->tagged) {
		struct fi_msg_tagged m = {
			.msg_iov = a->iov, .desc = desc, .iov_count = a->count,
			.addr = caddr, .tag = a->tag,
			.ignore = a->ignore & ~MRL_CTRL_TAG,
			.context = &req->hdr, .data = a->data,
		};
		ret = a->tx ? fi_tsendmsg(core, &m, flags) :
			      fi_trecvmsg(core, &m, flags);
	} else {
		struct fi_msg m = {
			.msg_iov = a->iov, .desc = desc, .iov_count = a->count,
			.addr = caddr, .context = &req->hdr, .data = a->data,
		};
		ret = a->tx ? fi_sendmsg(core, &m, flags) :
			      fi_recvmsg(core, &m, flags);
	}
	ret = mrl_msg_req_posted(ep, req, ret);
out:
	mrl_unlock(ep->domain);
	return ret;
}

/* Completion of a passed-through message.  Domain locked. */
void mrl_msg_complete(struct mrl_ep *ep, struct mrl_msg_req *req,
		      const struct fi_cq_tagged_entry *comp, fi_addr_t src,
		      int err, const struct fi_cq_err_entry *err_entry)
{
	mrl_assert_locked(ep->domain);
	bool tx = !(req->flags & FI_RECV);
	struct mrl_cq *cq = tx ? ep->tx_cq : ep->rx_cq;
	uint64_t cq_flags = tx ? ep->tx_cq_flags : ep->rx_cq_flags;
	uint64_t flags = (req->flags & (FI_SEND | FI_RECV | FI_MSG |
					FI_TAGGED | FI_ATOMIC | FI_READ |
					FI_WRITE)) |
			 (comp->flags & (FI_REMOTE_CQ_DATA | FI_MULTI_RECV));
	bool last = !(req->flags & FI_MULTI_RECV) ||
		    (comp->flags & FI_MULTI_RECV) || err;
	bool want = !(cq_flags & FI_SELECTIVE_COMPLETION) ||
		    (req->flags & FI_COMPLETION);
	struct mrl_cntr *cntr = mrl_ep_local_cntr(ep, req->flags);

	if (err && err != -FI_ECANCELED)
		MRL_DBG(FI_LOG_EP_DATA, "message completion error %d\n", err);
	if (err) {
		mrl_cntr_inc_err(cntr);
		if (cq) {
			struct fi_cq_err_entry e = {
				.op_context = req->context, .flags = flags,
				.err = err, .data = comp->data,
				.tag = comp->tag,
			};

			if (err_entry) {	/* what the core knows */
				e.prov_errno = err_entry->prov_errno;
				e.olen = err_entry->olen;
				e.len = err_entry->len;
				e.buf = err_entry->buf;
			}
			mrl_cq_write_err_entry(cq, &e);
		}
	} else {
		mrl_cntr_inc(cntr);
		if (cq && (want || !tx))
			mrl_cq_write(cq, req->context, flags,
				     tx ? req->len : comp->len,
				     tx ? NULL : comp->buf, comp->data,
				     comp->tag, src);
	}
	if (last)
		mrl_msg_req_put(ep, req);
}

static ssize_t mrl_recvmsg(struct fid_ep *ep, const struct fi_msg *msg,
			   uint64_t flags)
{
	struct mrl_msg_args a = {
		.iov = msg->msg_iov, .desc = msg->desc, .count = msg->iov_count,
		.addr = msg->addr, .context = msg->context, .flags = flags,
	};

	return mrl_msg_post(mrl_ep_of(ep), &a);
}

static ssize_t mrl_recvv(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src, void *ctx)
{
	struct fi_msg msg = { .msg_iov = iov, .desc = desc, .iov_count = count,
			      .addr = src, .context = ctx };

	return mrl_recvmsg(ep, &msg, 0);
}

static ssize_t mrl_recv(struct fid_ep *ep, void *buf, size_t len, void *desc,
			fi_addr_t src, void *ctx)
{
	struct iovec iov = { buf, len };

	return mrl_recvv(ep, &iov, &desc, 1, src, ctx);
}

static ssize_t mrl_sendmsg(struct fid_ep *ep, const struct fi_msg *msg,
			   uint64_t flags)
{
	struct mrl_msg_args a = {
		.iov = msg->msg_iov, .desc = msg->desc, .count = msg->iov_count,
		.addr = msg->addr, .context = msg->context, .flags = flags,
		.data = msg->data, .tx = true,
	};

	return mrl_msg_post(mrl_ep_of(ep), &a);
}

static ssize_t mrl_sendv(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest, void *ctx)
{
	struct fi_msg msg = { .msg_iov = iov, .desc = desc, .iov_count = count,
			      .addr = dest, .context = ctx };

	return mrl_sendmsg(ep, &msg, 0);
}

static ssize_t mrl_send(struct fid_ep *ep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, void *ctx)
{
	struct iovec iov = { (void *) buf, len };

	return mrl_sendv(ep, &iov, &desc, 1, dest, ctx);
}

static ssize_t mrl_senddata(struct fid_ep *ep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    void *ctx)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
			      .addr = dest, .context = ctx, .data = data };

	return mrl_sendmsg(ep, &msg, FI_REMOTE_CQ_DATA);
}

/* The four injects, by what they carry besides the bytes. */
enum mrl_inject_kind {
	MRL_INJECT_MSG,
	MRL_INJECT_MSG_DATA,
	MRL_INJECT_TAGGED,
	MRL_INJECT_TAGGED_DATA,
};

/* Injects go straight to the core: no completion, nothing to route. */
static ssize_t mrl_msg_inject(struct fid_ep *ep_fid, const void *buf,
			      size_t len, uint64_t data, fi_addr_t dest,
			      uint64_t tag, enum mrl_inject_kind kind)
{
	struct mrl_ep *ep = mrl_ep_of(ep_fid);
	struct fid_ep *core = ep->rails[0].ep;
	struct mrl_peer *peer = NULL;
	fi_addr_t caddr;
	ssize_t ret;

	if ((kind == MRL_INJECT_TAGGED || kind == MRL_INJECT_TAGGED_DATA) &&
	    (tag & MRL_CTRL_TAG)) {
		MRL_WARN(FI_LOG_EP_DATA, "tag bit 63 is reserved\n");
		return -FI_EINVAL;
	}
	if (!mrl_inject_fits(ep, len))
		return -FI_EINVAL;
	mrl_ep_lock(ep);
	if (ep->enabled && ep->msg_striped) {
		struct iovec iov = { (void *) buf, len };
		struct mrl_msg_args a = {
			.iov = &iov, .count = 1, .addr = dest, .tag = tag,
			.data = data, .tx = true,
			.tagged = kind == MRL_INJECT_TAGGED ||
				  kind == MRL_INJECT_TAGGED_DATA,
			.flags = kind == MRL_INJECT_MSG_DATA ||
				 kind == MRL_INJECT_TAGGED_DATA ?
				 FI_REMOTE_CQ_DATA : 0,
		};

		ret = mrl_striped_send(ep, &a, true);
		goto out;
	}
	ret = ep->enabled ? mrl_core_addr(ep, dest, true, &caddr, &peer) :
	      -FI_EOPBADSTATE;
	if (!ret)
		ret = mrl_fence_progress(ep, peer);
	if (ret)
		goto out;
	switch (kind) {
	case MRL_INJECT_MSG:
		ret = fi_inject(core, buf, len, caddr);
		break;
	case MRL_INJECT_MSG_DATA:
		ret = fi_injectdata(core, buf, len, data, caddr);
		break;
	case MRL_INJECT_TAGGED:
		ret = fi_tinject(core, buf, len, caddr, tag);
		break;
	case MRL_INJECT_TAGGED_DATA:
		ret = fi_tinjectdata(core, buf, len, data, caddr, tag);
		break;
	}
	mrl_inject_posted(ep, ep->cntr_send, ret);
out:
	mrl_unlock(ep->domain);
	return ret;
}

static ssize_t mrl_inject(struct fid_ep *ep, const void *buf, size_t len,
			  fi_addr_t dest)
{
	return mrl_msg_inject(ep, buf, len, 0, dest, 0, MRL_INJECT_MSG);
}

static ssize_t mrl_injectdata(struct fid_ep *ep, const void *buf, size_t len,
			      uint64_t data, fi_addr_t dest)
{
	return mrl_msg_inject(ep, buf, len, data, dest, 0,
			      MRL_INJECT_MSG_DATA);
}

struct fi_ops_msg mrl_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = mrl_recv,
	.recvv = mrl_recvv,
	.recvmsg = mrl_recvmsg,
	.send = mrl_send,
	.sendv = mrl_sendv,
	.sendmsg = mrl_sendmsg,
	.inject = mrl_inject,
	.senddata = mrl_senddata,
	.injectdata = mrl_injectdata,
};

/* ---- tagged ------------------------------------------------------------------ */

static ssize_t mrl_trecvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg,
			    uint64_t flags)
{
	struct mrl_msg_args a = {
		.iov = msg->msg_iov, .desc = msg->desc, .count = msg->iov_count,
		.addr = msg->addr, .context = msg->context, .flags = flags,
		.tag = msg->tag, .ignore = msg->ignore, .tagged = true,
	};

	return mrl_msg_post(mrl_ep_of(ep), &a);
}

static ssize_t mrl_trecvv(struct fid_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t src,
			  uint64_t tag, uint64_t ignore, void *ctx)
{
	struct fi_msg_tagged msg = { .msg_iov = iov, .desc = desc,
				     .iov_count = count, .addr = src,
				     .tag = tag, .ignore = ignore,
				     .context = ctx };

	return mrl_trecvmsg(ep, &msg, 0);
}

static ssize_t mrl_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
			 fi_addr_t src, uint64_t tag, uint64_t ignore,
			 void *ctx)
{
	struct iovec iov = { buf, len };

	return mrl_trecvv(ep, &iov, &desc, 1, src, tag, ignore, ctx);
}

static ssize_t mrl_tsendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg,
			    uint64_t flags)
{
	struct mrl_msg_args a = {
		.iov = msg->msg_iov, .desc = msg->desc, .count = msg->iov_count,
		.addr = msg->addr, .context = msg->context, .flags = flags,
		.tag = msg->tag, .data = msg->data, .tagged = true, .tx = true,
	};

	return mrl_msg_post(mrl_ep_of(ep), &a);
}

static ssize_t mrl_tsendv(struct fid_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t dest,
			  uint64_t tag, void *ctx)
{
	struct fi_msg_tagged msg = { .msg_iov = iov, .desc = desc,
				     .iov_count = count, .addr = dest,
				     .tag = tag, .context = ctx };

	return mrl_tsendmsg(ep, &msg, 0);
}

static ssize_t mrl_tsend(struct fid_ep *ep, const void *buf, size_t len,
			 void *desc, fi_addr_t dest, uint64_t tag, void *ctx)
{
	struct iovec iov = { (void *) buf, len };

	return mrl_tsendv(ep, &iov, &desc, 1, dest, tag, ctx);
}

static ssize_t mrl_tsenddata(struct fid_ep *ep, const void *buf, size_t len,
			     void *desc, uint64_t data, fi_addr_t dest,
			     uint64_t tag, void *ctx)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg_tagged msg = { .msg_iov = &iov, .desc = &desc,
				     .iov_count = 1, .addr = dest, .tag = tag,
				     .context = ctx, .data = data };

	return mrl_tsendmsg(ep, &msg, FI_REMOTE_CQ_DATA);
}

static ssize_t mrl_tinject(struct fid_ep *ep, const void *buf, size_t len,
			   fi_addr_t dest, uint64_t tag)
{
	return mrl_msg_inject(ep, buf, len, 0, dest, tag, MRL_INJECT_TAGGED);
}

static ssize_t mrl_tinjectdata(struct fid_ep *ep, const void *buf, size_t len,
			       uint64_t data, fi_addr_t dest, uint64_t tag)
{
	return mrl_msg_inject(ep, buf, len, data, dest, tag,
			      MRL_INJECT_TAGGED_DATA);
}

struct fi_ops_tagged mrl_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = mrl_trecv,
	.recvv = mrl_trecvv,
	.recvmsg = mrl_trecvmsg,
	.send = mrl_tsend,
	.sendv = mrl_tsendv,
	.sendmsg = mrl_tsendmsg,
	.inject = mrl_tinject,
	.senddata = mrl_tsenddata,
	.injectdata = mrl_tinjectdata,
};
