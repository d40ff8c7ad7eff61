/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * efa_emu endpoint and data path.  Every check fails the way efa's source
 * does (efa_rma.c, efa_msg.c; docs/efa.md, "Error returns on the RMA
 * path"), or, where efa would silently misbehave (rma_iov_count > 1,
 * keys over 32 bits), fails loudly.  Placement is as weak as efa's: a write of several packets
 * lands its later packets first, a write may land after a later one; but
 * a write's completion means its bytes are placed, as an SRD RDMA write's
 * does (docs/efa.md), so every core write is delivery-complete whatever
 * the caller asked.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "efa_emu.h"

/* efa.h: struct efa_context, written into the FI_CONTEXT2 area lent. */
struct emu_context {
	uint64_t completion_flags;
	fi_addr_t addr;
};

static struct emu_ep *to_ep(struct fid_ep *fid)
{
	return emu_container_of(fid, struct emu_ep, ep_fid);
}

static ssize_t ssize_nosys(void)
{
	return -FI_ENOSYS;
}

/* ---- requests ------------------------------------------------------------- */

static struct emu_req *req_new(struct emu_ep *ep, bool tx, void *context,
			       uint64_t flags, uint64_t cq_flags, size_t len,
			       fi_addr_t addr)
{
	struct emu_req *req = calloc(1, sizeof(*req));
	bool selective = tx ? ep->tx_selective : ep->rx_selective;

	if (!req)
		return NULL;
	req->live_next = ep->live;
	if (ep->live)
		ep->live->live_pprev = &req->live_next;
	req->live_pprev = &ep->live;
	ep->live = req;
	req->ep = ep;
	req->context = context;
	req->flags = cq_flags;
	req->len = len;
	req->pending = 1;
	if (!selective || (flags & FI_COMPLETION))
		req->cq = tx ? ep->tx_cq : ep->rx_cq;
	if (ep->domain->direct) {
		/* efa.h:171-184: efa-direct borrows the context, and without
		 * one there is no CQ entry at all */
		if (context && req->cq) {
			struct emu_context *c = context;

			c->completion_flags = cq_flags;
			c->addr = addr;
		} else {
			req->cq = NULL;
		}
	}
	return req;
}

/*
 * A request's end.  The core drops what it held when its endpoint closes,
 * with no completion: ep_close frees those from the endpoint's list.
 */
void emu_req_free(struct emu_req *req)
{
	*req->live_pprev = req->live_next;
	if (req->live_next)
		req->live_next->live_pprev = req->live_pprev;
	free(req);
}

/*
 * Does this transmit begin the fault?  Only transmits that carry bytes are
 * counted; the zero-byte writes multirail flushes a rail with before a
 * send are not.  By default the fault begins under data; with
 * FAIL_START=fence, under the first such flush after FAIL_AFTER.
 */
static bool fault_begins(struct emu_domain *dom, size_t len)
{
	if (len)
		dom->tx_ops++;
	if (dom->tx_ops <= (uint64_t) emu_knobs.fail_after)
		return false;
	return emu_knobs.fail_on_fence ? !len : len != 0;
}

/* Is this transmit on a NIC the fault knobs name, while its fault lasts? */
static bool tx_faulty_len(struct emu_ep *ep, size_t len)
{
	struct emu_domain *dom = ep->domain;

	if (!dom->failing)
		return false;
	if (!dom->fail_start_ns) {
		if (!fault_begins(dom, len))
			return false;
		dom->fail_start_ns = emu_now_ns();
	}
	return !emu_knobs.fail_ms || emu_now_ns() < dom->fail_start_ns +
					(uint64_t) emu_knobs.fail_ms * 1000000;
}

/*
 * The core refused a transmit (-FI_EAGAIN) that fault_begins counted:
 * FAIL_AFTER counts transmits that went, not tries (a peer still
 * connecting refuses many).
 */
static void tx_refused(struct emu_ep *ep, size_t len)
{
	struct emu_domain *dom = ep->domain;

	if (dom->failing && !dom->fail_start_ns && len && dom->tx_ops)
		dom->tx_ops--;
}

static bool tx_faulty(struct emu_ep *ep)
{
	return tx_faulty_len(ep, 1);
}

/* Does the fault complete transmits with an error (not stall, refuse)? */
static bool fault_errs(void)
{
	return !emu_knobs.fail_stall && !emu_knobs.fail_refuse;
}

/* A transmit that fails: an error completion, like a dead link. */
static bool tx_fails(struct emu_ep *ep)
{
	return fault_errs() && tx_faulty(ep);
}

static bool rma_fails(struct emu_ep *ep, size_t len)
{
	return fault_errs() && tx_faulty_len(ep, len);
}

/* A stalled NIC carries an RMA out but completes it when the fault ends. */
static void tx_stall(struct emu_ep *ep, struct emu_req *req, size_t len)
{
	struct emu_domain *dom = ep->domain;

	if (!emu_knobs.fail_stall || !tx_faulty_len(ep, len))
		return;
	req->hold_until_ns = emu_knobs.fail_ms ?
		dom->fail_start_ns + (uint64_t) emu_knobs.fail_ms * 1000000 :
		UINT64_MAX;
}

static ssize_t fail_req(struct emu_req *req)
{
	req->err = FI_EIO;
	emu_req_done(req, NULL, FI_ADDR_NOTAVAIL);
	return 0;
}

/*
 * Fault knobs: every Nth post starts a burst of -FI_EAGAIN (on the NIC
 * EAGAIN_NIC names, or all); a NIC failing with FAIL_MODE=refuse refuses
 * every post while its fault lasts (each post counted as a transmit).
 */
static bool eagain_now(struct emu_ep *ep)
{
	if (emu_knobs.fail_refuse && tx_faulty(ep))
		return true;
	if (!emu_knobs.eagain_every || !ep->domain->eagain_here)
		return false;
	if (ep->eagain_left > 0) {
		ep->eagain_left--;
		return true;
	}
	if (++ep->posts % (uint64_t) emu_knobs.eagain_every)
		return false;
	ep->eagain_left = emu_knobs.eagain_burst - 1;
	return emu_knobs.eagain_burst > 0;
}

/*
 * The core's descriptors for the caller's.  efa-direct: every buffer needs
 * its registration's desc (efa_rma.c:253-258, efa_msg.c:117-123); efa
 * registers a NULL one itself.  A desc that is not ours, or does not cover
 * its buffer, is refused on both.
 */
static int core_descs(struct emu_ep *ep, const struct iovec *iov, void **desc,
		      size_t count, void **out)
{
	struct emu_domain *dom = ep->domain;
	struct emu_mr *mr;
	size_t i;

	for (i = 0; i < count; i++) {
		void *d = desc ? desc[i] : NULL;
		const char *b = iov[i].iov_base;

		out[i] = NULL;
		if (!d && (!iov[i].iov_len || !dom->direct))
			continue;
		mr = emu_mr_of(dom, d);
		if (!mr) {
			EMU_WARN(FI_LOG_EP_DATA, "%s desc for iov %zu\n",
				 d ? "foreign" : "no", i);
			return -FI_EINVAL;
		}
		if (b < mr->buf || b + iov[i].iov_len > mr->buf + mr->len) {
			EMU_WARN(FI_LOG_EP_DATA, "iov %zu lies outside its "
				 "registration\n", i);
			return -FI_EINVAL;
		}
		/* device memory goes through a bounce buffer instead */
		out[i] = mr->core ? fi_mr_desc(mr->core) : NULL;
	}
	return 0;
}

static size_t iov_len(const struct iovec *iov, size_t count)
{
	size_t len = 0, i;

	for (i = 0; i < count; i++)
		len += iov[i].iov_len;
	return len;
}

/* ---- messages ----------------------------------------------------------------- */

static const struct fi_msg *untagged(const struct fi_msg_tagged *t,
				     struct fi_msg *m)
{
	*m = (struct fi_msg) {
		.msg_iov = t->msg_iov, .desc = t->desc,
		.iov_count = t->iov_count, .addr = t->addr,
		.context = t->context, .data = t->data,
	};
	return m;
}

static ssize_t post_msg(struct emu_ep *ep, bool tx, bool tagged,
			const struct fi_msg_tagged *msg, uint64_t flags)
{
	void *desc[EMU_RDM_IOV_LIMIT];
	struct fi_msg_tagged m = *msg;
	struct iovec bounce_iov;
	struct fi_msg um;
	size_t limit = ep->domain->direct ? EMU_DIRECT_IOV_LIMIT :
					    EMU_RDM_IOV_LIMIT;
	size_t len = iov_len(msg->msg_iov, msg->iov_count);
	struct emu_req *req;
	ssize_t ret;

	if (tagged && !(ep->caps & FI_TAGGED))
		return -FI_EOPNOTSUPP;
	if (msg->iov_count > limit) {
		EMU_WARN(FI_LOG_EP_DATA, "iov_count %zu > %zu\n",
			 msg->iov_count, limit);
		return -FI_EINVAL;
	}
	if (tagged && emu_hmem_active() && (msg->tag & EMU_TAG_INTERNAL)) {
		EMU_WARN(FI_LOG_EP_DATA, "tag bit 62 is the provider's\n");
		return -FI_EINVAL;
	}
	m.ignore &= emu_hmem_active() ? ~EMU_TAG_INTERNAL : ~0ULL;
	if (tx && (flags & FI_INJECT) && ep->domain->direct &&
	    len > EMU_DIRECT_INLINE)	/* efa_msg.c:269-307 */
		return -FI_EOPNOTSUPP;
	ret = core_descs(ep, msg->msg_iov, msg->desc, msg->iov_count, desc);
	if (ret)
		return ret;
	if (tx && eagain_now(ep))
		return -FI_EAGAIN;
	req = req_new(ep, tx, msg->context, flags,
		      (tx ? FI_SEND : FI_RECV) | (tagged ? FI_TAGGED : FI_MSG),
		      len, msg->addr);
	if (!req)
		return -FI_ENOMEM;
	if (tx && tx_fails(ep))
		return fail_req(req);
	m.desc = desc;
	if (emu_hmem_msg_staged(ep->domain, msg->desc, msg->iov_count)) {
		ret = emu_hmem_msg_bounce(ep, tx, req, &m, &bounce_iov, desc,
					  len);
		if (ret) {
			emu_req_free(req);
			return ret;
		}
	}
	m.context = req;
	m.data &= 0xffffffffu;
	flags = (flags & (FI_REMOTE_CQ_DATA | FI_INJECT)) | FI_COMPLETION;
	if (tagged)
		ret = tx ? fi_tsendmsg(ep->core, &m, flags) :
			   fi_trecvmsg(ep->core, &m, flags);
	else
		ret = tx ? fi_sendmsg(ep->core, untagged(&m, &um), flags) :
			   fi_recvmsg(ep->core, untagged(&m, &um), flags);
	if (tx && ret == -FI_EAGAIN)
		tx_refused(ep, 1);
	if (ret) {
		if (req->bounce)
			emu_hmem_req_done(req, NULL);
		emu_req_free(req);
	}
	return ret;
}

/*
 * A send beyond the size the program said it would keep to
 * (FI_OPT_MAX_MSG_SIZE, FI_OPT_MAX_TAGGED_SIZE): efa asserts; refused here.
 */
static bool beyond_max(const struct emu_ep *ep, bool tagged, size_t len)
{
	size_t max = tagged ? ep->opts.max_tagged : ep->opts.max_msg;

	if (len <= max)
		return false;
	EMU_WARN(FI_LOG_EP_DATA, "send of %zu bytes beyond FI_OPT_MAX_%s_SIZE "
		 "(%zu)\n", len, tagged ? "TAGGED" : "MSG", max);
	return true;
}

static size_t msg_len(const struct fi_msg_tagged *msg)
{
	size_t i, len = 0;

	for (i = 0; msg->msg_iov && i < msg->iov_count; i++)
		len += msg->msg_iov[i].iov_len;
	return len;
}

static ssize_t locked_msg(struct fid_ep *fid, bool tx, bool tagged,
			  const struct fi_msg_tagged *msg, uint64_t flags)
{
	struct emu_ep *ep = to_ep(fid);
	ssize_t ret;

	if (tx && beyond_max(ep, tagged, msg_len(msg)))
		return -FI_EINVAL;
	pthread_mutex_lock(&ep->domain->lock);
	ret = post_msg(ep, tx, tagged, msg, flags);
	pthread_mutex_unlock(&ep->domain->lock);
	return ret;
}

static ssize_t ep_recvmsg(struct fid_ep *ep, const struct fi_msg *msg,
			  uint64_t flags)
{
	struct fi_msg_tagged m = {
		.msg_iov = msg->msg_iov, .desc = msg->desc,
		.iov_count = msg->iov_count, .addr = msg->addr,
		.context = msg->context, .data = msg->data,
	};

	return locked_msg(ep, false, false, &m, flags);
}

static ssize_t ep_sendmsg(struct fid_ep *ep, const struct fi_msg *msg,
			  uint64_t flags)
{
	struct fi_msg_tagged m = {
		.msg_iov = msg->msg_iov, .desc = msg->desc,
		.iov_count = msg->iov_count, .addr = msg->addr,
		.context = msg->context, .data = msg->data,
	};

	return locked_msg(ep, true, false, &m, flags);
}

static ssize_t ep_recv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		       fi_addr_t src, void *context)
{
	struct iovec iov = { buf, len };
	struct fi_msg m = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
			    .addr = src, .context = context };

	return ep_recvmsg(ep, &m, 0);
}

static ssize_t ep_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc,
			size_t count, fi_addr_t src, void *context)
{
	struct fi_msg m = { .msg_iov = iov, .desc = desc, .iov_count = count,
			    .addr = src, .context = context };

	return ep_recvmsg(ep, &m, 0);
}

static ssize_t ep_senddata(struct fid_ep *ep, const void *buf, size_t len,
			   void *desc, uint64_t data, fi_addr_t dest,
			   void *context)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg m = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
			    .addr = dest, .context = context, .data = data };

	return ep_sendmsg(ep, &m, FI_REMOTE_CQ_DATA);
}

static ssize_t ep_send(struct fid_ep *ep, const void *buf, size_t len,
		       void *desc, fi_addr_t dest, void *context)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg m = { .msg_iov = &iov, .desc = &desc, .iov_count = 1,
			    .addr = dest, .context = context };

	return ep_sendmsg(ep, &m, 0);
}

static ssize_t ep_sendv(struct fid_ep *ep, const struct iovec *iov,
			void **desc, size_t count, fi_addr_t dest,
			void *context)
{
	struct fi_msg m = { .msg_iov = iov, .desc = desc, .iov_count = count,
			    .addr = dest, .context = context };

	return ep_sendmsg(ep, &m, 0);
}

/* Message injects go to the core's inject: no completion, no request. */
static ssize_t inject_msg(struct fid_ep *fid, const void *buf, size_t len,
			  bool data_too, uint64_t data, fi_addr_t dest,
			  bool tagged, uint64_t tag)
{
	struct emu_ep *ep = to_ep(fid);
	void *host = NULL;
	ssize_t ret;

	if (ep->domain->direct && len > EMU_DIRECT_INLINE)
		return -FI_EOPNOTSUPP;
	if (tagged && !(ep->caps & FI_TAGGED))
		return -FI_EOPNOTSUPP;
	if (beyond_max(ep, tagged, len))
		return -FI_EINVAL;
	if (tagged && emu_hmem_active() && (tag & EMU_TAG_INTERNAL))
		return -FI_EINVAL;
	/* an inject has no descriptor: CUDA says where its buffer is */
	if (emu_hmem_offered() && emu_hmem_is_device(buf)) {
		host = emu_hmem_host_copy(buf, len);
		if (!host)
			return -FI_EIO;
		buf = host;
	}
	pthread_mutex_lock(&ep->domain->lock);
	if (eagain_now(ep)) {
		ret = -FI_EAGAIN;
	} else if (tx_fails(ep)) {
		ret = 0;	/* lost: no completion to carry the error */
	} else if (tagged) {
		ret = data_too ? fi_tinjectdata(ep->core, buf, len,
						data & 0xffffffffu, dest, tag) :
				 fi_tinject(ep->core, buf, len, dest, tag);
	} else {
		ret = data_too ? fi_injectdata(ep->core, buf, len,
					       data & 0xffffffffu, dest) :
				 fi_inject(ep->core, buf, len, dest);
		if (ret == -FI_EAGAIN)
			tx_refused(ep, 1);
	}
	pthread_mutex_unlock(&ep->domain->lock);
	free(host);
	return ret;
}

static ssize_t ep_inject(struct fid_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest)
{
	return inject_msg(ep, buf, len, false, 0, dest, false, 0);
}

static ssize_t ep_injectdata(struct fid_ep *ep, const void *buf, size_t len,
			     uint64_t data, fi_addr_t dest)
{
	return inject_msg(ep, buf, len, true, data, dest, false, 0);
}

static struct fi_ops_msg msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = ep_recv,
	.recvv = ep_recvv,
	.recvmsg = ep_recvmsg,
	.send = ep_send,
	.sendv = ep_sendv,
	.sendmsg = ep_sendmsg,
	.inject = ep_inject,
	.senddata = ep_senddata,
	.injectdata = ep_injectdata,
};

static ssize_t ep_trecvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	return locked_msg(ep, false, true, msg, flags);
}

static ssize_t ep_tsendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	return locked_msg(ep, true, true, msg, flags);
}

static ssize_t ep_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
			fi_addr_t src, uint64_t tag, uint64_t ignore,
			void *context)
{
	struct iovec iov = { buf, len };
	struct fi_msg_tagged m = { .msg_iov = &iov, .desc = &desc,
				   .iov_count = 1, .addr = src, .tag = tag,
				   .ignore = ignore, .context = context };

	return ep_trecvmsg(ep, &m, 0);
}

static ssize_t ep_trecvv(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src,
			 uint64_t tag, uint64_t ignore, void *context)
{
	struct fi_msg_tagged m = { .msg_iov = iov, .desc = desc,
				   .iov_count = count, .addr = src, .tag = tag,
				   .ignore = ignore, .context = context };

	return ep_trecvmsg(ep, &m, 0);
}

static ssize_t ep_tsend(struct fid_ep *ep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, uint64_t tag,
			void *context)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg_tagged m = { .msg_iov = &iov, .desc = &desc,
				   .iov_count = 1, .addr = dest, .tag = tag,
				   .context = context };

	return ep_tsendmsg(ep, &m, 0);
}

static ssize_t ep_tsendv(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest,
			 uint64_t tag, void *context)
{
	struct fi_msg_tagged m = { .msg_iov = iov, .desc = desc,
				   .iov_count = count, .addr = dest, .tag = tag,
				   .context = context };

	return ep_tsendmsg(ep, &m, 0);
}

static ssize_t ep_tsenddata(struct fid_ep *ep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t tag, void *context)
{
	struct iovec iov = { (void *) buf, len };
	struct fi_msg_tagged m = { .msg_iov = &iov, .desc = &desc,
				   .iov_count = 1, .addr = dest, .tag = tag,
				   .context = context, .data = data };

	return ep_tsendmsg(ep, &m, FI_REMOTE_CQ_DATA);
}

static ssize_t ep_tinject(struct fid_ep *ep, const void *buf, size_t len,
			  fi_addr_t dest, uint64_t tag)
{
	return inject_msg(ep, buf, len, false, 0, dest, true, tag);
}

static ssize_t ep_tinjectdata(struct fid_ep *ep, const void *buf, size_t len,
			      uint64_t data, fi_addr_t dest, uint64_t tag)
{
	return inject_msg(ep, buf, len, true, data, dest, true, tag);
}

static struct fi_ops_tagged tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = ep_trecv,
	.recvv = ep_trecvv,
	.recvmsg = ep_trecvmsg,
	.send = ep_tsend,
	.sendv = ep_tsendv,
	.sendmsg = ep_tsendmsg,
	.inject = ep_tinject,
	.senddata = ep_tsenddata,
	.injectdata = ep_tinjectdata,
};

static struct fi_ops_tagged no_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = (void *) ssize_nosys,
	.recvv = (void *) ssize_nosys,
	.recvmsg = (void *) ssize_nosys,
	.send = (void *) ssize_nosys,
	.sendv = (void *) ssize_nosys,
	.sendmsg = (void *) ssize_nosys,
	.inject = (void *) ssize_nosys,
	.senddata = (void *) ssize_nosys,
	.injectdata = (void *) ssize_nosys,
};

/* ---- RMA ---------------------------------------------------------------------------- */

/* [off, off + len) of an iov array. */
static size_t slice(const struct iovec *iov, void **desc, size_t count,
		    size_t off, size_t len, struct iovec *out, void **odesc)
{
	size_t i, n = 0, take;

	for (i = 0; i < count && len; i++) {
		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		take = iov[i].iov_len - off;
		if (take > len)
			take = len;
		out[n].iov_base = (char *) iov[i].iov_base + off;
		out[n].iov_len = take;
		odesc[n++] = desc[i];
		len -= take;
		off = 0;
	}
	return n;
}

static ssize_t post_part(struct emu_rma *r, size_t off, size_t len,
			 bool with_data)
{
	struct emu_ep *ep = r->req->ep;
	struct iovec iov[EMU_RDM_IOV_LIMIT];
	void *desc[EMU_RDM_IOV_LIMIT];
	struct fi_rma_iov rma = { r->rma.addr + off, len, r->rma.key };
	struct fi_msg_rma m = {
		.msg_iov = iov, .desc = desc, .rma_iov = &rma,
		.rma_iov_count = 1, .addr = r->addr, .context = r->req,
		.data = emu_wire_data(r->data, iov_len(r->iov, r->count)),
	};
	uint64_t flags = FI_COMPLETION;

	m.iov_count = slice(r->iov, r->desc, r->count, off, len, iov, desc);
	if (!r->write)
		return fi_readmsg(ep->core, &m, flags);
	/* completion = placed at the target, as an SRD write's */
	flags |= FI_DELIVERY_COMPLETE;
	if (with_data)
		flags |= FI_REMOTE_CQ_DATA;
	return fi_writemsg(ep->core, &m, flags);
}

/*
 * Posts what of r the core does not have yet.  efa's packets may land in
 * any order, each packet's bytes whole: a write of more than one packet
 * places its second part first (the packets from about its middle on),
 * then the first part, which alone carries the CQ data, so a writedata's
 * data reaches the target after all its bytes (the parts travel one tcp
 * connection), as a write-with-immediate's does.  A write of one packet
 * lands in order: clients rely on it (aws-ofi-nccl's control entries, 64
 * bytes whose last field says that the rest is there).  Once the second
 * part is in flight, r must be posted again until its first part goes.
 */
static ssize_t post_rma(struct emu_rma *r)
{
	size_t len = iov_len(r->iov, r->count), mid;
	bool data = r->flags & FI_REMOTE_CQ_DATA;
	ssize_t ret;

	if (!emu_knobs.reorder_us || len <= EMU_MTU)
		return post_part(r, 0, len, data);
	/* a packet boundary at or below the middle, past the first packet */
	mid = len / 2 / EMU_MTU * EMU_MTU;
	if (!mid)
		mid = EMU_MTU;
	if (!r->tail_posted) {
		ret = post_part(r, mid, len - mid, false);
		if (ret)
			return ret;
		r->tail_posted = true;
		r->req->pending = 2;
	}
	return post_part(r, 0, mid, data);
}

static void queue_rma(struct emu_ep *ep, const struct emu_rma *r,
		      uint64_t due_ns)
{
	struct emu_rma *copy = malloc(sizeof(*copy));

	if (!copy) {	/* its second part may be in flight: fail the rest */
		r->req->err = FI_ENOMEM;
		emu_req_done(r->req, NULL, FI_ADDR_NOTAVAIL);
		return;
	}
	*copy = *r;
	copy->due_ns = due_ns;
	copy->next = NULL;
	*ep->held_tail = copy;
	ep->held_tail = &copy->next;
}

/*
 * After post_rma: 0 when the op is posted, queued or failed with an error
 * completion; an error for the caller only when nothing of it went out.
 */
static ssize_t posted(struct emu_ep *ep, struct emu_rma *r, ssize_t ret)
{
	if (!ret || !r->tail_posted)
		return ret;
	if (ret == -FI_EAGAIN) {
		queue_rma(ep, r, 0);
	} else {
		r->req->err = FI_EIO;
		emu_req_done(r->req, NULL, FI_ADDR_NOTAVAIL);
	}
	return 0;
}

/* Held writes go, in order, once due. */
void emu_ep_flush(struct emu_ep *ep)
{
	uint64_t now = emu_now_ns();
	struct emu_rma *r;
	ssize_t ret;

	if (ep->xfers)
		emu_hmem_flush(ep);
	while ((r = ep->held) && r->due_ns <= now) {
		ret = post_rma(r);
		if (ret == -FI_EAGAIN)
			return;
		if (ret) {
			r->req->err = FI_EIO;
			emu_req_done(r->req, NULL, FI_ADDR_NOTAVAIL);
		}
		ep->held = r->next;
		if (!ep->held)
			ep->held_tail = &ep->held;
		free(r);
	}
}

/* Every other RMA (at random) waits, so that later ones may land first. */
static bool hold(struct emu_ep *ep, const struct emu_rma *r)
{
	if (!emu_knobs.reorder_us || !(emu_random(ep->domain) & 1))
		return false;
	queue_rma(ep, r, emu_now_ns() + (uint64_t) emu_knobs.reorder_us * 1000);
	return true;
}

static ssize_t check_rma(struct emu_ep *ep, bool write,
			 const struct fi_msg_rma *msg, uint64_t flags,
			 size_t len)
{
	struct emu_domain *dom = ep->domain;
	size_t limit = dom->direct ? EMU_DIRECT_RMA_SGE : EMU_RDM_IOV_LIMIT;

	if (!(ep->caps & FI_RMA))
		return -FI_EOPNOTSUPP;
	if (msg->iov_count > limit) {
		EMU_WARN(FI_LOG_EP_DATA, "RMA iov_count %zu > %zu\n",
			 msg->iov_count, limit);
		return -FI_EINVAL;
	}
	if (msg->rma_iov_count != 1) {	/* efa would ignore the others */
		EMU_WARN(FI_LOG_EP_DATA, "rma_iov_count %zu: efa uses one\n",
			 msg->rma_iov_count);
		return -FI_EINVAL;
	}
	if (dom->direct && write && (flags & FI_INJECT) && len) {
		EMU_WARN(FI_LOG_EP_DATA, "efa-direct has no RMA inject\n");
		return -FI_ENOSYS;	/* efa_rma.c:212-216 */
	}
	if (dom->direct && len > emu_knobs.max_rma) {
		EMU_WARN(FI_LOG_EP_DATA, "RMA of %zu bytes > max_rdma_size "
			 "%zu\n", len, emu_knobs.max_rma);
		return -FI_EMSGSIZE;
	}
	if (msg->rma_iov[0].len != len) {
		EMU_WARN(FI_LOG_EP_DATA, "rma_iov of %zu bytes for %zu\n",
			 msg->rma_iov[0].len, len);
		return -FI_EINVAL;
	}
	return 0;
}

static ssize_t post_rma_msg(struct emu_ep *ep, bool write,
			    const struct fi_msg_rma *msg, uint64_t flags)
{
	size_t len = iov_len(msg->msg_iov, msg->iov_count);
	struct emu_rma r = { .write = write, .count = msg->iov_count,
			     .addr = msg->addr, .data = msg->data & 0xffffffffu,
			     .flags = flags };
	ssize_t ret = check_rma(ep, write, msg, flags, len);

	if (ret)
		return ret;
	ret = core_descs(ep, msg->msg_iov, msg->desc, msg->iov_count, r.desc);
	if (ret)
		return ret;
	if (eagain_now(ep))
		return -FI_EAGAIN;
	if (msg->iov_count)	/* a 0-byte write may have no iov array */
		memcpy(r.iov, msg->msg_iov, msg->iov_count * sizeof(*r.iov));
	r.rma = msg->rma_iov[0];
	r.req = req_new(ep, true, msg->context, flags,
			FI_RMA | (write ? FI_WRITE : FI_READ), len, msg->addr);
	if (!r.req)
		return -FI_ENOMEM;
	if (rma_fails(ep, len))
		return fail_req(r.req);
	tx_stall(ep, r.req, len);
	if (r.rma.key > 0xffffffffu) {
		/* efa would use the low 32 bits: say it instead */
		EMU_WARN(FI_LOG_EP_DATA, "key 0x%llx is wider than efa's 32 "
			 "bits\n", (unsigned long long) r.rma.key);
		r.req->err = FI_EINVAL;
		emu_req_done(r.req, NULL, FI_ADDR_NOTAVAIL);
		return 0;
	}
	if (emu_hmem_rma_staged(ep->domain, msg->desc, msg->iov_count,
				msg->iov_count ? msg->msg_iov[0].iov_base : NULL,
				r.rma.key)) {
		ret = emu_hmem_rma(ep, write, r.iov, r.count, &r.rma, r.addr,
				   r.data, flags, r.req);
		if (ret)
			emu_req_free(r.req);
		return ret;
	}
	if (hold(ep, &r))
		return 0;
	ret = posted(ep, &r, post_rma(&r));
	if (ret == -FI_EAGAIN)
		tx_refused(ep, len);
	if (ret)
		emu_req_free(r.req);
	return ret;
}

static ssize_t locked_rma(struct fid_ep *fid, bool write,
			  const struct fi_msg_rma *msg, uint64_t flags)
{
	struct emu_ep *ep = to_ep(fid);
	ssize_t ret;

	pthread_mutex_lock(&ep->domain->lock);
	ret = post_rma_msg(ep, write, msg, flags);
	pthread_mutex_unlock(&ep->domain->lock);
	return ret;
}

static ssize_t ep_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
			   uint64_t flags)
{
	return locked_rma(ep, true, msg, flags);
}

static ssize_t ep_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
			  uint64_t flags)
{
	return locked_rma(ep, false, msg, flags & ~FI_REMOTE_CQ_DATA);
}

static ssize_t rma_one(struct fid_ep *ep, bool write, const struct iovec *iov,
		       void **desc, size_t count, fi_addr_t dest,
		       uint64_t addr, uint64_t key, void *context,
		       uint64_t data, uint64_t flags)
{
	struct fi_rma_iov rma = { addr, iov_len(iov, count), key };
	struct fi_msg_rma m = { .msg_iov = iov, .desc = desc,
				.iov_count = count, .addr = dest,
				.rma_iov = &rma, .rma_iov_count = 1,
				.context = context, .data = data };

	return locked_rma(ep, write, &m, flags);
}

static ssize_t ep_write(struct fid_ep *ep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, uint64_t addr,
			uint64_t key, void *context)
{
	struct iovec iov = { (void *) buf, len };

	return rma_one(ep, true, &iov, &desc, 1, dest, addr, key, context, 0,
		       0);
}

static ssize_t ep_writev(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest,
			 uint64_t addr, uint64_t key, void *context)
{
	return rma_one(ep, true, iov, desc, count, dest, addr, key, context,
		       0, 0);
}

static ssize_t ep_writedata(struct fid_ep *ep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t addr, uint64_t key, void *context)
{
	struct iovec iov = { (void *) buf, len };

	return rma_one(ep, true, &iov, &desc, 1, dest, addr, key, context,
		       data, FI_REMOTE_CQ_DATA);
}

static ssize_t ep_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
		       fi_addr_t src, uint64_t addr, uint64_t key,
		       void *context)
{
	struct iovec iov = { buf, len };

	return rma_one(ep, false, &iov, &desc, 1, src, addr, key, context, 0,
		       0);
}

static ssize_t ep_readv(struct fid_ep *ep, const struct iovec *iov,
			void **desc, size_t count, fi_addr_t src,
			uint64_t addr, uint64_t key, void *context)
{
	return rma_one(ep, false, iov, desc, count, src, addr, key, context,
		       0, 0);
}

/* efa-direct: only 0 bytes (efa_rma.c:384-386); efa: up to inject_size. */
static ssize_t inject_rma(struct fid_ep *fid, const void *buf, size_t len,
			  bool data_too, uint64_t data, fi_addr_t dest,
			  uint64_t addr, uint64_t key)
{
	struct emu_ep *ep = to_ep(fid);
	ssize_t ret;

	if (ep->domain->direct && len) {
		EMU_WARN(FI_LOG_EP_DATA, "efa-direct: RMA inject of %zu "
			 "bytes\n", len);
		return -FI_ENOSYS;
	}
	if (key > 0xffffffffu)
		return -FI_EINVAL;
	pthread_mutex_lock(&ep->domain->lock);
	if (eagain_now(ep))
		ret = -FI_EAGAIN;
	else if (tx_fails(ep))
		ret = 0;
	else if (emu_hmem_rma_staged(ep->domain, NULL, 1, buf, key)) {
		struct iovec iov = { (void *) buf, len };
		struct fi_rma_iov rma = { addr, len, key };

		ret = emu_hmem_rma(ep, true, &iov, 1, &rma, dest,
				   data & 0xffffffffu,
				   data_too ? FI_REMOTE_CQ_DATA : 0, NULL);
	} else
		ret = data_too ? fi_inject_writedata(ep->core, buf, len,
						     emu_wire_data(data, len),
						     dest, addr, key) :
				 fi_inject_write(ep->core, buf, len, dest, addr,
						 key);
	if (ret == -FI_EAGAIN)
		tx_refused(ep, 1);
	pthread_mutex_unlock(&ep->domain->lock);
	return ret;
}

static ssize_t ep_inject_write(struct fid_ep *ep, const void *buf, size_t len,
			       fi_addr_t dest, uint64_t addr, uint64_t key)
{
	return inject_rma(ep, buf, len, false, 0, dest, addr, key);
}

static ssize_t ep_inject_writedata(struct fid_ep *ep, const void *buf,
				   size_t len, uint64_t data, fi_addr_t dest,
				   uint64_t addr, uint64_t key)
{
	return inject_rma(ep, buf, len, true, data, dest, addr, key);
}

static struct fi_ops_rma rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = ep_read,
	.readv = ep_readv,
	.readmsg = ep_readmsg,
	.write = ep_write,
	.writev = ep_writev,
	.writemsg = ep_writemsg,
	.inject = ep_inject_write,
	.writedata = ep_writedata,
	.injectdata = ep_inject_writedata,
};

/* ---- endpoint object ------------------------------------------------------------------ */

static bool cq_has(const struct emu_cq *cq, const struct emu_ep *ep)
{
	int i;

	for (i = 0; i < cq->neps; i++)
		if (cq->eps[i] == ep)
			return true;
	return false;
}

static void cq_forget(struct emu_cq *cq, struct emu_ep *ep)
{
	int i;

	for (i = 0; cq && i < cq->neps; i++) {
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->neps];
			return;
		}
	}
}

static int ep_close(struct fid *fid)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);
	int ret = fi_close(&ep->core->fid);

	if (ret)
		return ret;
	pthread_mutex_lock(&ep->domain->lock);
	cq_forget(ep->tx_cq, ep);
	if (ep->rx_cq != ep->tx_cq)
		cq_forget(ep->rx_cq, ep);
	pthread_mutex_unlock(&ep->domain->lock);
	while (ep->held) {
		struct emu_rma *r = ep->held;

		ep->held = r->next;
		emu_req_free(r->req);
		free(r);
	}
	emu_hmem_ep_close(ep);
	while (ep->live)
		emu_req_free(ep->live);
	free(ep);
	return 0;
}

static int bind_cq(struct emu_ep *ep, struct emu_cq *cq, uint64_t flags)
{
	int ret;

	if (cq->neps == EMU_EPS_PER_CQ)
		return -FI_ENOSPC;
	ret = fi_ep_bind(ep->core, &cq->core->fid,
			 flags & (FI_TRANSMIT | FI_RECV));
	if (ret)
		return ret;
	if (flags & FI_TRANSMIT) {
		ep->tx_cq = cq;
		ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
	}
	if (flags & FI_RECV) {
		ep->rx_cq = cq;
		ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
	}
	/* once, though bound for transmit and receive apart: close forgets once */
	pthread_mutex_lock(&ep->domain->lock);
	if (!cq_has(cq, ep))
		cq->eps[cq->neps++] = ep;
	pthread_mutex_unlock(&ep->domain->lock);
	return 0;
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);

	switch (bfid->fclass) {
	case FI_CLASS_AV:
		ep->av = emu_container_of(bfid, struct fid_av, fid);
		return fi_ep_bind(ep->core, bfid, flags);
	case FI_CLASS_CQ:
		return bind_cq(ep, emu_container_of(bfid, struct emu_cq,
						    cq_fid.fid), flags);
	case FI_CLASS_CNTR:
		EMU_WARN(FI_LOG_EP_CTRL, "counters are not emulated\n");
		return -FI_ENOSYS;
	default:
		return -FI_EINVAL;
	}
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);

	int ret;

	if (command != FI_ENABLE)
		return -FI_ENOSYS;
	ret = fi_enable(ep->core);
	if (!ret) {
		ep->enabled = true;
		pthread_mutex_lock(&ep->domain->lock);
		ret = emu_hmem_ep_enable(ep);
		pthread_mutex_unlock(&ep->domain->lock);
	}
	return ret;
}

static struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = (void *) emu_nosys,
};

/* efa's endpoint options the emulation keeps, by name; NULL: the core's */
static void *opt_of(struct emu_ep *ep, int name, size_t *len)
{
	struct emu_opts *o = &ep->opts;

	*len = sizeof(bool);
	switch (name) {
	case EMU_OPT_CUDA_API_PERMITTED:
		return &o->cuda_api_permitted;
	case EMU_OPT_SHARED_MEMORY_PERMITTED:
		return &o->shm_permitted;
	case EMU_OPT_EFA_USE_DEVICE_RDMA:
		return &o->use_device_rdma;
	case EMU_OPT_EFA_WRITE_IN_ORDER:
		return &o->write_in_order;
	case EMU_OPT_EFA_HOMOGENEOUS_PEERS:
		return &o->homogeneous_peers;
	}
	*len = sizeof(size_t);
	switch (name) {
	case EMU_OPT_EFA_RNR_RETRY:
		return &o->rnr_retry;
	case EMU_OPT_MAX_MSG_SIZE:
		return &o->max_msg;
	case EMU_OPT_MAX_TAGGED_SIZE:
		return &o->max_tagged;
	}
	return NULL;
}

static void opts_init(struct emu_opts *o)
{
	*o = (struct emu_opts) {
		.cuda_api_permitted = true, .shm_permitted = true,
		.use_device_rdma = true, .rnr_retry = 7,
		.max_msg = SIZE_MAX, .max_tagged = SIZE_MAX,
	};
}

static int ep_getopt(fid_t fid, int level, int name, void *val, size_t *len)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);
	size_t size;
	void *opt = opt_of(ep, name, &size);

	if (level == FI_OPT_ENDPOINT &&
	    (name == EMU_OPT_EFA_EMULATED_READ ||
	     name == EMU_OPT_EFA_EMULATED_WRITE ||
	     name == EMU_OPT_EFA_EMULATED_ATOMICS)) {
		static const bool device_rma;	/* p5's EFA: RDMA read, write */

		opt = (void *) &device_rma;
		size = sizeof(bool);
	}
	if (level == FI_OPT_ENDPOINT && opt) {
		if (*len < size)
			return -FI_ETOOSMALL;
		memcpy(val, opt, size);
		*len = size;
		return 0;
	}
#if FI_MAJOR_VERSION >= 2
	if (level == FI_OPT_ENDPOINT && name == FI_OPT_INJECT_RMA_SIZE &&
	    ep->domain->direct && *len >= sizeof(size_t)) {
		*(size_t *) val = 0;	/* efa_base_ep.c:633-635 */
		*len = sizeof(size_t);
		return 0;
	}
#endif
	return fi_getopt(&ep->core->fid, level, name, val, len);
}

/* As efa_rdm_ep_setopt: sizes checked, RNR retries before fi_enable. */
static int ep_setopt(fid_t fid, int level, int name, const void *val,
		     size_t len)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);
	size_t size;
	void *opt = opt_of(ep, name, &size);

	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	if (name == EMU_OPT_EFA_SENDRECV_IN_ORDER)
		return -FI_EOPNOTSUPP;
	if (!opt)
		return fi_setopt(&ep->core->fid, level, name, val, len);
	if (len != size || !val)
		return -FI_EINVAL;
	if (name == EMU_OPT_EFA_RNR_RETRY && ep->enabled)
		return -FI_EINVAL;
	if (name == EMU_OPT_CUDA_API_PERMITTED && !emu_hmem_offered())
		return -FI_EINVAL;	/* efa without CUDA */
	if (size == sizeof(bool) && ep->domain->opt_refuse)
		return -FI_EOPNOTSUPP;
	memcpy(opt, val, size);
	return 0;
}

static ssize_t ep_cancel(fid_t fid, void *context)
{
	return -FI_ENOENT;
}

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = (void *) emu_nosys,
	.rx_ctx = (void *) emu_nosys,
	.rx_size_left = (void *) ssize_nosys,
	.tx_size_left = (void *) ssize_nosys,
};

static int ep_getname(fid_t fid, void *addr, size_t *len)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);

	return fi_getname(&ep->core->fid, addr, len);
}

static int ep_setname(fid_t fid, void *addr, size_t len)
{
	struct emu_ep *ep = emu_container_of(fid, struct emu_ep, ep_fid.fid);

	return fi_setname(&ep->core->fid, addr, len);
}

static struct fi_ops_cm cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ep_setname,
	.getname = ep_getname,
	.getpeer = (void *) emu_nosys,
	.connect = (void *) emu_nosys,
	.listen = (void *) emu_nosys,
	.accept = (void *) emu_nosys,
	.reject = (void *) emu_nosys,
	.shutdown = (void *) emu_nosys,
	.join = (void *) emu_nosys,
};

static struct fi_ops_atomic no_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = (void *) ssize_nosys,
	.writev = (void *) ssize_nosys,
	.writemsg = (void *) ssize_nosys,
	.inject = (void *) ssize_nosys,
	.readwrite = (void *) ssize_nosys,
	.readwritev = (void *) ssize_nosys,
	.readwritemsg = (void *) ssize_nosys,
	.compwrite = (void *) ssize_nosys,
	.compwritev = (void *) ssize_nosys,
	.compwritemsg = (void *) ssize_nosys,
	.writevalid = (void *) emu_nosys,
	.readwritevalid = (void *) emu_nosys,
	.compwritevalid = (void *) emu_nosys,
};

int emu_ep_open(struct fid_domain *fid, struct fi_info *info,
		struct fid_ep **out, void *context)
{
	struct emu_domain *dom = emu_container_of(fid, struct emu_domain,
						  domain_fid);
	struct fi_info *core = fi_dupinfo(dom->core_info);
	struct emu_ep *ep;
	int ret;

	if (!core)
		return -FI_ENOMEM;
	if (info->src_addr && info->src_addrlen) {
		free(core->src_addr);
		core->src_addr = malloc(info->src_addrlen);
		if (!core->src_addr) {
			fi_freeinfo(core);
			return -FI_ENOMEM;
		}
		memcpy(core->src_addr, info->src_addr, info->src_addrlen);
		core->src_addrlen = info->src_addrlen;
	}
	ep = calloc(1, sizeof(*ep));
	if (!ep) {
		fi_freeinfo(core);
		return -FI_ENOMEM;
	}
	ret = fi_endpoint(dom->core_domain, core, &ep->core, NULL);
	fi_freeinfo(core);
	if (ret) {
		free(ep);
		return ret;
	}
	ep->domain = dom;
	opts_init(&ep->opts);
	ep->held_tail = &ep->held;
	ep->caps = info->caps ? info->caps : FI_MSG | FI_RMA;
	if (dom->direct)
		ep->caps &= ~FI_TAGGED;
	ep->ep_fid.fid.fclass = FI_CLASS_EP;
	ep->ep_fid.fid.context = context;
	ep->ep_fid.fid.ops = &ep_fi_ops;
	ep->ep_fid.ops = &ep_ops;
	ep->ep_fid.cm = &cm_ops;
	ep->ep_fid.msg = &msg_ops;
	ep->ep_fid.rma = &rma_ops;
	ep->ep_fid.tagged = dom->direct ? &no_tagged_ops : &tagged_ops;
	ep->ep_fid.atomic = &no_atomic_ops;
	*out = &ep->ep_fid;
	return 0;
}
