/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Endpoint: one core endpoint and one private core CQ per rail, its
 * bindings, enable, names and close.  The data path that reads those CQs
 * is mrl_progress.c.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "rdma/fi_ext_multirail.h"

static struct mrl_ep *mrl_ep_of_fid(struct fid *fid)
{
	return mrl_container_of(fid, struct mrl_ep, ep_fid.fid);
}

/* ---- bind ----------------------------------------------------------------- */

static int mrl_bind_av(struct mrl_ep *ep, struct mrl_av *av)
{
	int r, ret;

	if (av->nrails != ep->nrails || ep->av) {
		MRL_WARN(FI_LOG_EP_CTRL, "AV from another domain, or bound "
			 "twice\n");
		return -FI_EINVAL;
	}
	for (r = 0; r < ep->nrails; r++) {
		ret = fi_ep_bind(ep->rails[r].ep, &av->core[r]->fid, 0);
		if (ret)
			return ret;
	}
	if (ep->ctrl_ep) {
		ret = fi_ep_bind(ep->ctrl_ep, &av->core[0]->fid, 0);
		if (ret)
			return ret;
	}
	ep->av = av;
	av->ep = ep;
	av->nbound++;
	return 0;
}

/* What an RMA op's completion is: see mrl_rma_complete. */
static void mrl_note_rma_completion(struct mrl_ep *ep)
{
	ep->rma_cq_only = ep->tx_cq &&
			  !(ep->tx_cq_flags & FI_SELECTIVE_COMPLETION) &&
			  !ep->cntr_write && !ep->cntr_read;
}

static int mrl_bind_cq(struct mrl_ep *ep, struct mrl_cq *cq, uint64_t flags)
{
	int ret;

	if (!(flags & (FI_TRANSMIT | FI_RECV))) {
		MRL_WARN(FI_LOG_EP_CTRL, "CQ bind needs FI_TRANSMIT or "
			 "FI_RECV\n");
		return -FI_EINVAL;
	}
	ret = mrl_cq_attach(cq, ep);
	if (ret)
		return ret;
	if (flags & FI_TRANSMIT) {
		ep->tx_cq = cq;
		ep->tx_cq_flags = flags;
	}
	if (flags & FI_RECV) {
		ep->rx_cq = cq;
		ep->rx_cq_flags = flags;
	}
	mrl_note_rma_completion(ep);
	return 0;
}

static int mrl_bind_remote_cntr(struct mrl_ep *ep, struct mrl_cntr *cntr,
				uint64_t flags)
{
	int r, ret;

	for (r = 0; r < ep->nrails; r++) {
		struct fid_cntr *core;

		if (ep->rails[r].rcntr) {
			MRL_WARN(FI_LOG_EP_CTRL, "one remote-event counter per "
				 "endpoint\n");
			return -FI_EINVAL;
		}
		ret = mrl_cntr_open_core(cntr, r, ep->domain->rails[r].domain,
					 &core);
		if (ret)
			return ret;
		ep->rails[r].rcntr = core;
		ret = fi_ep_bind(ep->rails[r].ep, &core->fid,
				 flags & (FI_REMOTE_WRITE | FI_REMOTE_READ));
		if (ret) {
			MRL_WARN(FI_LOG_EP_CTRL, "rail %d: remote counter bind: "
				 "%s\n", r, fi_strerror(-ret));
			return ret;
		}
	}
	return 0;
}

static int mrl_bind_cntr(struct mrl_ep *ep, struct mrl_cntr *cntr,
			 uint64_t flags)
{
	int ret = mrl_cntr_attach(cntr, ep);

	if (ret)
		return ret;
	if (flags & FI_WRITE)
		ep->cntr_write = cntr;
	if (flags & FI_READ)
		ep->cntr_read = cntr;
	mrl_note_rma_completion(ep);
	if (flags & FI_SEND)
		ep->cntr_send = cntr;
	if (flags & FI_RECV)
		ep->cntr_recv = cntr;
	if (flags & FI_REMOTE_WRITE)
		ep->cntr_rwrite = cntr;
	if (flags & FI_REMOTE_READ)
		ep->cntr_rread = cntr;
	if (flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))
		return mrl_bind_remote_cntr(ep, cntr, flags);
	return 0;
}

static int mrl_ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct mrl_ep *ep = mrl_ep_of_fid(fid);
	int ret;

	mrl_ep_lock(ep);
	switch (bfid->fclass) {
	case FI_CLASS_AV:
		ret = mrl_bind_av(
			ep, mrl_container_of(bfid, struct mrl_av, av_fid.fid));
		break;
	case FI_CLASS_CQ:
		ret = mrl_bind_cq(
			ep, mrl_container_of(bfid, struct mrl_cq, cq_fid.fid),
			flags);
		break;
	case FI_CLASS_CNTR:
		ret = mrl_bind_cntr(
			ep,
			mrl_container_of(bfid, struct mrl_cntr, cntr_fid.fid),
			flags);
		break;
	case FI_CLASS_EQ:
		ret = 0;	/* no connection events on RDM */
		break;
	default:
		MRL_WARN(FI_LOG_EP_CTRL, "bind of class %zu not supported\n",
			 bfid->fclass);
		ret = -FI_EINVAL;
	}
	mrl_unlock(ep->domain);
	return ret;
}

/* ---- enable / name --------------------------------------------------------- */

static int mrl_build_name(struct mrl_ep *ep)
{
	int naddrs = mrl_ep_ncore(ep), r, ret;
	bool string = ep->domain->rails[0].info->addr_format == FI_ADDR_STR;
	struct mrl_addr_hdr *hdr;
	size_t alen = 0, len;
	char buf[256];

	/*
	 * Every rail's address gets a slot of the longest one's size.  A
	 * string address (shm's fi_shm://PID:UID:IDX grows with the
	 * endpoint's index) is zero-padded there, which the core's string
	 * parser ignores; a binary one must have one length.
	 */
	for (r = 0; r < naddrs; r++) {
		len = sizeof(buf);
		ret = fi_getname(&mrl_ep_core(ep, r)->fid, buf, &len);
		if (ret)
			return ret;
		if (r && len != alen && !string) {
			MRL_WARN(FI_LOG_EP_CTRL, "rail %d address length %zu "
				 "differs from rail 0's %zu\n", r, len, alen);
			return -FI_EINVAL;
		}
		if (string && (!len || buf[len - 1]))
			len++;
		alen = len > alen ? len : alen;
	}
	free(ep->name);
	ep->namelen = mrl_addr_size(naddrs, alen);
	ep->name = calloc(1, ep->namelen);
	if (!ep->name)
		return -FI_ENOMEM;
	hdr = ep->name;
	hdr->magic = MRL_ADDR_MAGIC;
	hdr->version = MRL_ADDR_VERSION;
	hdr->nrails = ep->nrails;
	hdr->flags = ep->ctrl_ep ? MRL_ADDR_CTRL : 0;
	hdr->rail_addrlen = alen;
	for (r = 0; r < naddrs; r++) {
		len = alen;
		fi_getname(&mrl_ep_core(ep, r)->fid,
			   (char *) (hdr + 1) + r * alen, &len);
	}
	return 0;
}

/*
 * Each step is done once, so a retry after a failure redoes only what
 * failed; what a failed step left is undone, except the control receives:
 * once posted they belong to the core until its endpoints close, so the
 * endpoint can then only be closed.
 */
static int mrl_enable(struct mrl_ep *ep)
{
	int r, ret;

	if (ep->enabled)
		return 0;
	if (ep->enable_failed) {
		MRL_WARN(FI_LOG_EP_CTRL, "fi_enable: failed before, after "
			 "posting receives: close the endpoint\n");
		return -FI_EOPBADSTATE;
	}
	if (!ep->av) {
		MRL_WARN(FI_LOG_EP_CTRL, "fi_enable: no AV bound\n");
		return -FI_ENOAV;
	}
	if (!ep->tx_cq && !ep->rx_cq && !ep->cntr_write && !ep->cntr_read &&
	    !ep->cntr_send && !ep->cntr_recv) {
		MRL_WARN(FI_LOG_EP_CTRL, "fi_enable: no CQ or counter bound\n");
		return -FI_ENOCQ;
	}
	for (r = ep->rails_enabled; r < ep->nrails; r++) {
		ret = fi_enable(ep->rails[r].ep);
		if (ret) {
			MRL_WARN(FI_LOG_EP_CTRL, "rail %d: fi_enable: %s\n", r,
				 fi_strerror(-ret));
			return ret;
		}
		ep->rails_enabled = r + 1;
	}
	if (ep->ctrl_ep && !ep->ctrl_ep_enabled) {
		ret = fi_enable(ep->ctrl_ep);
		if (ret) {
			MRL_WARN(FI_LOG_EP_CTRL, "control endpoint: fi_enable: "
				 "%s\n", fi_strerror(-ret));
			return ret;
		}
		ep->ctrl_ep_enabled = true;
	}
	ret = mrl_build_name(ep);
	if (ret)
		return ret;
	ret = mrl_rma_init(ep);
	if (ret)
		return ret;
	ret = mrl_ctrl_init(ep);
	if (!ret)
		ret = mrl_pkt_init(ep);
	if (ret) {
		mrl_rma_fini(ep);
		ep->enable_failed = true;
		return ret;
	}
	/* the user's FI_SOURCE on every rail, rail 0's control claims, the
	 * striped path's packets where the core names their senders */
	for (r = 0; r < ep->nrails; r++) {
		ep->rails[r].names_src = !!(ep->domain->rails[r].info->caps &
					    FI_SOURCE);
		ep->rails[r].reads_src = ep->want_src ||
					 (!r && ep->domain->src0) ||
					 (ep->msg_striped &&
					  ep->rails[r].names_src);
	}
	/* the leased polls' turn (struct mrl_lease) */
	for (r = 0; r < MRL_MAX_RAILS + MRL_HEALTH_TICK; r++)
		ep->idle_cycle[r] = &ep->rails[r % ep->nrails];
	ep->enabled = true;
	ep->progress_held = false;
	mrl_connect_hello_partial(ep);
	return 0;
}

static int mrl_ep_control(struct fid *fid, int command, void *arg)
{
	struct mrl_ep *ep = mrl_ep_of_fid(fid);
	uint64_t *flags = arg;
	int ret = 0;

	mrl_ep_lock(ep);
	switch (command) {
	case FI_ENABLE:
		ret = mrl_enable(ep);
		break;
	case FI_GETOPSFLAG:
		if (*flags & FI_TRANSMIT)
			*flags = ep->tx_op_flags;
		else if (*flags & FI_RECV)
			*flags = ep->rx_op_flags;
		else
			ret = -FI_EINVAL;
		break;
	case FI_SETOPSFLAG:
		if (*flags & FI_TRANSMIT)
			mrl_rma_tx_flags_set(ep, *flags & ~FI_TRANSMIT);
		else if (*flags & FI_RECV)
			ep->rx_op_flags = *flags & ~FI_RECV;
		else
			ret = -FI_EINVAL;
		break;
	default:
		ret = -FI_ENOSYS;
	}
	mrl_unlock(ep->domain);
	return ret;
}

/*
 * Rail 0's address alone (and the control endpoint's, where there is
 * one), marked partial: a peer that inserts it reaches rail 0 at once and
 * learns the other rails from our HELLO_ACK.
 */
static size_t mrl_compact_name(const struct mrl_ep *ep, void *addr, size_t have)
{
	const struct mrl_addr_hdr *full = ep->name;
	const void *ctrl = mrl_addr_ctrl(full);
	struct mrl_addr_hdr *hdr = addr;
	size_t len = mrl_addr_size(1 + !!ctrl, full->rail_addrlen), delta;

	if (have < len) {
		/* the control endpoint's address as its difference */
		delta = mrl_addr_delta(full, addr, have);
		return delta && delta <= have ? delta : len;
	}
	*hdr = *full;
	hdr->nrails = 1;
	hdr->flags |= MRL_ADDR_PARTIAL;
	memcpy(hdr + 1, full + 1, full->rail_addrlen);
	if (ctrl)
		memcpy((char *) (hdr + 1) + full->rail_addrlen, ctrl,
		       full->rail_addrlen);
	return len;
}

/*
 * Every rail's address when the buffer holds it.  Many applications
 * (Open MPI among them) pass FI_NAME_MAX bytes, too few for 4 rails of
 * tcp or 2 of efa: they get the compact form instead of -FI_ETOOSMALL.
 */
static int mrl_ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct mrl_ep *ep = mrl_ep_of_fid(fid);
	size_t have = *addrlen, len;
	int ret = 0;

	mrl_ep_lock(ep);
	if (!ep->name)
		ret = mrl_build_name(ep);
	if (ret)
		goto out;
	if (have >= ep->namelen) {
		memcpy(addr, ep->name, ep->namelen);
		*addrlen = ep->namelen;
		goto out;
	}
	len = mrl_compact_name(ep, addr, have);
	if (have < len) {
		*addrlen = ep->namelen;
		ret = -FI_ETOOSMALL;
		goto out;
	}
	*addrlen = len;
	if (!ep->compact_logged) {
		MRL_INFO(FI_LOG_EP_CTRL, "fi_getname: %zu bytes hold rail 0's "
			 "address only (all rails: %zu); peers learn the rest "
			 "in a HELLO\n", have, ep->namelen);
		ep->compact_logged = true;
	}
out:
	mrl_unlock(ep->domain);
	return ret;
}

static struct fi_ops_cm mrl_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = mrl_no_setname,
	.getname = mrl_ep_getname,
	.getpeer = mrl_no_getpeer,
	.connect = mrl_no_connect,
	.listen = mrl_no_listen,
	.accept = mrl_no_accept,
	.reject = mrl_no_reject,
	.shutdown = mrl_no_shutdown,
	.join = mrl_no_join,
};

/* ---- cancel (options: mrl_ep_opt.c) ------------------------------------- */

static ssize_t mrl_ep_cancel(fid_t fid, void *context)
{
	struct mrl_ep *ep = mrl_ep_of_fid(fid);
	ssize_t ret = -FI_ENOENT;
	size_t i;

	mrl_ep_lock(ep);
	if (ep->msg_striped) {
		/* nothing is posted before fi_enable, nor are the queues */
		ret = ep->enabled ? mrl_eager_cancel(ep, context) : -FI_ENOENT;
		mrl_unlock(ep->domain);
		return ret;
	}
	for (i = 0; i < ep->msg_pool_size; i++) {
		struct mrl_msg_req *req = &ep->msg_reqs[i];

		if (req->hdr.kind == MRL_REQ_MSG && req->context == context &&
		    (req->flags & FI_RECV)) {
			ret = fi_cancel(&ep->rails[0].ep->fid, &req->hdr.ctx);
			break;
		}
	}
	mrl_unlock(ep->domain);
	return ret;
}

static struct fi_ops_ep mrl_ep_base_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = mrl_ep_cancel,
	.getopt = mrl_ep_getopt,
	.setopt = mrl_ep_setopt,
	.tx_ctx = mrl_no_tx_ctx,
	.rx_ctx = mrl_no_rx_ctx,
	.rx_size_left = mrl_no_size_left,
	.tx_size_left = mrl_no_size_left,
};

/* ---- open / close ---------------------------------------------------------- */

/* Keep what this endpoint's core counters counted, then close them. */
static void mrl_drop_remote_cntrs(struct mrl_ep *ep)
{
	struct mrl_cntr *cntr = ep->cntr_rwrite ? ep->cntr_rwrite :
				ep->cntr_rread;
	struct fid_cntr *core;
	int r, i;

	for (r = 0; r < ep->nrails; r++) {
		core = ep->rails[r].rcntr;
		if (!core || !cntr)
			continue;
		cntr->value += fi_cntr_read(core);
		cntr->err += fi_cntr_readerr(core);
		for (i = 0; i < cntr->ncore; i++) {
			if (cntr->core[i] == core) {
				cntr->core[i] = cntr->core[--cntr->ncore];
				break;
			}
		}
		fi_close(&core->fid);
		ep->rails[r].rcntr = NULL;
	}
}

static void mrl_ep_close_rails(struct mrl_ep *ep)
{
	int r;

	if (ep->ctrl_ep)
		fi_close(&ep->ctrl_ep->fid);
	ep->ctrl_ep = NULL;
	for (r = 0; r < ep->nrails; r++) {
		if (ep->rails[r].ep)
			fi_close(&ep->rails[r].ep->fid);
		if (ep->rails[r].cq)
			fi_close(&ep->rails[r].cq->fid);
	}
}

/*
 * libfabric 1.17's ofi_rxm (and net) dereferences its AV when an endpoint
 * that never had one closes (rxm_freeall_conns).  An endpoint closed before the user
 * bound an AV gives its core endpoints a spare, empty one first.
 */
static void mrl_give_core_avs(struct mrl_ep *ep, struct fid_av **spare)
{
	struct fi_av_attr attr = { .type = FI_AV_TABLE };
	int r;

	for (r = 0; r < ep->nrails; r++) {
		if (!ep->rails[r].ep ||
		    fi_av_open(ep->domain->rails[r].domain, &attr, &spare[r],
			       NULL))
			continue;
		if (fi_ep_bind(ep->rails[r].ep, &spare[r]->fid, 0)) {
			fi_close(&spare[r]->fid);
			spare[r] = NULL;
		}
	}
	/* 1.17's net does the same: the control endpoint shares rail 0's */
	if (ep->ctrl_ep && spare[0])
		fi_ep_bind(ep->ctrl_ep, &spare[0]->fid, 0);
}

static int mrl_ext_rail_stats(struct fid_ep *ep_fid, int rail,
			      struct fi_multirail_rail_stats *stats);

/*
 * What each rail carried, at FI_LOG_LEVEL=info: how a program that is not
 * ours (NCCL, Open MPI) shows its bytes went over every rail.
 */
static void mrl_ep_log_rails(struct mrl_ep *ep)
{
	struct fi_multirail_rail_stats st;
	int i;

	if (!ep->enabled || !fi_log_enabled(&mrl_prov, FI_LOG_INFO,
					    FI_LOG_EP_CTRL))
		return;
	for (i = 0; i < ep->nrails; i++) {
		if (mrl_ext_rail_stats(&ep->ep_fid, i, &st))
			continue;
		MRL_INFO(FI_LOG_EP_CTRL, "rail %d (%s): %lu RMA chunks, %lu "
			 "bytes posted, %lu completed, %lu errors; %lu message "
			 "packets, %lu bytes sent\n", i,
			 st.domain, (unsigned long) st.tx_ops,
			 (unsigned long) st.tx_bytes,
			 (unsigned long) st.bytes_completed,
			 (unsigned long) st.errors,
			 (unsigned long) ep->rails[i].pkts_sent,
			 (unsigned long) ep->rails[i].pkt_bytes_sent);
	}
}

static int mrl_ep_close(struct fid *fid)
{
	struct mrl_ep *ep = mrl_ep_of_fid(fid);
	struct mrl_cntr *cntrs[6] = { ep->cntr_write, ep->cntr_read,
				      ep->cntr_send, ep->cntr_recv,
				      ep->cntr_rwrite, ep->cntr_rread };
	struct fid_av *spare_avs[MRL_MAX_RAILS] = { NULL };
	int i;

	mrl_ep_log_rails(ep);
	mrl_ep_lock(ep);
	if (ep->tx_cq)
		mrl_cq_detach(ep->tx_cq, ep);
	if (ep->rx_cq)
		mrl_cq_detach(ep->rx_cq, ep);
	for (i = 0; i < 6; i++)
		if (cntrs[i])
			mrl_cntr_detach(cntrs[i], ep);
	if (ep->av) {
		for (i = 0; i < (int) ep->av->nall; i++) {
			mrl_fence_forget_ep(ep, ep->av->all[i]);
			mrl_connect_forget_ep(ep, ep->av->all[i]);
			mrl_health_forget_ep(ep, ep->av->all[i]);
		}
		if (ep->av->ep == ep)
			ep->av->ep = NULL;
		ep->av->nbound--;
	}
	mrl_unlock(ep->domain);

	/* Core endpoints first: they may still hold our buffers. */
	if (!ep->av)
		mrl_give_core_avs(ep, spare_avs);
	if (ep->ctrl_ep)
		fi_close(&ep->ctrl_ep->fid);
	ep->ctrl_ep = NULL;
	for (i = 0; i < ep->nrails; i++)
		if (ep->rails[i].ep)
			fi_close(&ep->rails[i].ep->fid);
	for (i = 0; i < ep->nrails; i++) {
		ep->rails[i].ep = NULL;
		if (spare_avs[i])
			fi_close(&spare_avs[i]->fid);
	}
	mrl_ep_lock(ep);
	mrl_drop_remote_cntrs(ep);
	mrl_ctrl_forget_sends(ep);
	mrl_unlock(ep->domain);
	mrl_ctrl_fini(ep);
	mrl_ep_close_rails(ep);
	mrl_pkt_fini(ep);
	mrl_rma_fini(ep);
	mrl_msg_fini(ep);
	free(ep->name);
	fi_freeinfo(ep->info);
	mrl_domain_release(ep->domain);
	free(ep);
	return 0;
}

static int mrl_ext_rail_count(struct fid_ep *ep_fid)
{
	return mrl_container_of(ep_fid, struct mrl_ep, ep_fid)->nrails;
}

static int mrl_ext_rail_stats(struct fid_ep *ep_fid, int rail,
			      struct fi_multirail_rail_stats *stats)
{
	struct mrl_ep *ep = mrl_container_of(ep_fid, struct mrl_ep, ep_fid);
	const struct mrl_rail_credit *rc;

	if (rail < 0 || rail >= ep->nrails || !stats)
		return -FI_EINVAL;
	mrl_ep_lock(ep);
	memset(stats, 0, sizeof(*stats));
	strncpy(stats->domain, ep->domain->rails[rail].info->domain_attr->name,
		sizeof(stats->domain) - 1);
	stats->ctrl_sent = ep->rails[rail].ctrl_sent;
	stats->ctrl_received = ep->rails[rail].ctrl_received;
	stats->peers_down = ep->rails[rail].peers_down;
	stats->downs = ep->rails[rail].downs;
	stats->rejoins = ep->rails[rail].rejoins;
	stats->probes = ep->rails[rail].probes;
	if (ep->enabled) {
		rc = &ep->engine.rail[rail];
		mrl_engine_rail_posted(&ep->engine, rail, &stats->tx_ops,
				       &stats->tx_bytes);
		stats->bytes_completed = rc->bytes_completed;
		stats->errors = rc->errors + ep->rails[rail].losses;
		stats->reissued = rc->reissued;
		stats->state = mrl_health_rail_state(ep, rail);
	}
	mrl_unlock(ep->domain);
	return 0;
}

/* The v2 statistics: the v3 structure's beginning. */
static int mrl_ext_rail_stats_v2(struct fid_ep *ep_fid, int rail,
				 struct fi_multirail_rail_stats *stats)
{
	struct fi_multirail_rail_stats all;
	int ret = mrl_ext_rail_stats(ep_fid, rail, &all);

	if (!ret)
		memcpy(stats, &all, offsetof(struct fi_multirail_rail_stats,
					     state));
	return ret;
}

/* The first size bytes of the endpoint's counts (fields only added). */
static int mrl_ext_ep_stats(struct fid_ep *ep_fid,
			    struct fi_multirail_ep_stats *stats, size_t size)
{
	struct mrl_ep *ep = mrl_container_of(ep_fid, struct mrl_ep, ep_fid);
	struct fi_multirail_ep_stats all = { 0 };

	if (!stats) {
		MRL_WARN(FI_LOG_EP_CTRL, "ep_stats: no structure given\n");
		return -FI_EINVAL;
	}
	mrl_ep_lock(ep);
	all.rma_general = ep->rma_general;
	all.lost_sends = ep->lost_sends;
	for (int r = 0; r < ep->nrails; r++)
		all.conn_resets += ep->rails[r].resets;
	mrl_unlock(ep->domain);
	memcpy(stats, &all, size < sizeof(all) ? size : sizeof(all));
	return 0;
}

/* The first size bytes of one rail's message counts. */
static int mrl_ext_msg_stats(struct fid_ep *ep_fid, int rail,
			     struct fi_multirail_msg_stats *stats, size_t size)
{
	struct mrl_ep *ep = mrl_container_of(ep_fid, struct mrl_ep, ep_fid);
	struct fi_multirail_msg_stats all = { 0 };
	int k;

	if (!stats || rail < 0 || rail >= ep->nrails) {
		MRL_WARN(FI_LOG_EP_CTRL, "msg_stats: rail %d of %d, or no "
			 "structure given\n", rail, ep->nrails);
		return -FI_EINVAL;
	}
	mrl_ep_lock(ep);
	all.packets_sent = ep->rails[rail].pkts_sent;
	all.bytes_sent = ep->rails[rail].pkt_bytes_sent;
	all.packets_received = ep->rails[rail].pkts_received;
	for (k = 0; k < MRL_PKT_DROP_KINDS; k++)
		all.dropped += ep->pkt_dropped[k];
	all.duplicates = ep->msg_dups;
	mrl_unlock(ep->domain);
	memcpy(stats, &all, size < sizeof(all) ? size : sizeof(all));
	return 0;
}

static struct fi_multirail_ep_ops mrl_ext_ops = {
	.size = sizeof(struct fi_multirail_ep_ops),
	.rail_count = mrl_ext_rail_count,
	.rail_stats = mrl_ext_rail_stats,
	.ep_stats = mrl_ext_ep_stats,
	.msg_stats = mrl_ext_msg_stats,
};

static struct fi_multirail_ep_ops mrl_ext_ops_v2 = {
	.size = sizeof(struct fi_multirail_ep_ops),
	.rail_count = mrl_ext_rail_count,
	.rail_stats = mrl_ext_rail_stats_v2,
	.ep_stats = mrl_ext_ep_stats,
};

static int mrl_ep_ops_open(struct fid *fid, const char *name, uint64_t flags,
			   void **ops, void *context)
{
	if (name && !strcmp(name, FI_MULTIRAIL_EP_OPS)) {
		*ops = &mrl_ext_ops;
		return 0;
	}
	if (name && !strcmp(name, "multirail_ep_ops_v2")) {
		*ops = &mrl_ext_ops_v2;
		return 0;
	}
	return -FI_ENOSYS;
}

static struct fi_ops mrl_ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_ep_close,
	.bind = mrl_ep_bind,
	.control = mrl_ep_control,
	.ops_open = mrl_ep_ops_open,
};

static int mrl_ep_open_rail(struct mrl_ep *ep, int r)
{
	struct mrl_domain *dom = ep->domain;
	const struct mrl_addr_hdr *src = ep->info->src_addr;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_info *info;
	int ret;

	info = fi_dupinfo(dom->rails[r].info);
	if (!info)
		return -FI_ENOMEM;
	/* Bind where fi_getinfo said (a server's well-known port on rail 0). */
	if (src && !mrl_addr_check(src, ep->info->src_addrlen) &&
	    r < src->nrails && src->rail_addrlen == info->src_addrlen &&
	    info->src_addr)
		memcpy(info->src_addr, mrl_addr_rail(src, r),
		       info->src_addrlen);
	ret = fi_endpoint(dom->rails[r].domain, info, &ep->rails[r].ep, NULL);
	cq_attr.size = info->tx_attr->size + info->rx_attr->size;
	if (!r && dom->ctrl_own_ep)
		cq_attr.size += MRL_CTRL_RX_COUNT + MRL_CTRL_TX_COUNT;
	fi_freeinfo(info);
	if (ret) {
		MRL_WARN(FI_LOG_EP_CTRL, "rail %d: fi_endpoint: %s\n", r,
			 fi_strerror(-ret));
		return ret;
	}
	ret = fi_cq_open(dom->rails[r].domain, &cq_attr, &ep->rails[r].cq,
			 NULL);
	if (ret)
		return ret;
	return fi_ep_bind(ep->rails[r].ep, &ep->rails[r].cq->fid,
			  FI_TRANSMIT | FI_RECV);
}

/*
 * A core without FI_TAGGED cannot keep our control messages apart from the
 * user's messages on rail 0: they get a core endpoint of their own there,
 * on rail 0's CQ (progress reads it with the rail) and AV, whose address
 * follows the rails' in ours (MRL_ADDR_CTRL).  It binds where rail 0's
 * domain says, never to the user's well-known source.
 */
static int mrl_open_ctrl_ep(struct mrl_ep *ep)
{
	struct mrl_rail *rail0 = &ep->domain->rails[0];
	int ret;

	ret = fi_endpoint(rail0->domain, rail0->info, &ep->ctrl_ep, NULL);
	if (ret) {
		MRL_WARN(FI_LOG_EP_CTRL, "control endpoint: fi_endpoint: %s\n",
			 fi_strerror(-ret));
		ep->ctrl_ep = NULL;
		return ret;
	}
	return fi_ep_bind(ep->ctrl_ep, &ep->rails[0].cq->fid,
			  FI_TRANSMIT | FI_RECV);
}

/* The most iovs an op may carry: ours, the core's, and what info says. */
static size_t mrl_iov_limit(size_t asked, size_t core)
{
	size_t n = core && core < MRL_IOV_LIMIT ? core : MRL_IOV_LIMIT;

	return asked && asked < n ? asked : n;
}

/*
 * A transmit takes MRL_SG_IOV_MAX iovs: RMA cuts them into pieces
 * (mrl_rma.c), a send of more than the core takes goes from a copy.
 */
static size_t mrl_tx_iov_limit(size_t asked)
{
	return asked && asked < MRL_SG_IOV_MAX ? asked : MRL_SG_IOV_MAX;
}

int mrl_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **ep_out, void *context)
{
	struct mrl_domain *dom = mrl_container_of(domain, struct mrl_domain,
						  domain_fid);
	struct mrl_ep *ep;
	size_t pool;
	int r, ret;

	if (!info || (info->ep_attr && info->ep_attr->type != FI_EP_RDM)) {
		MRL_WARN(FI_LOG_EP_CTRL, "only FI_EP_RDM endpoints\n");
		return -FI_EINVAL;
	}
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -FI_ENOMEM;
	ep->domain = dom;
	ep->nrails = dom->nrails;
	ep->info = fi_dupinfo(info);
	if (!ep->info) {
		free(ep);
		return -FI_ENOMEM;
	}
	ep->want_src = !!(info->caps & FI_SOURCE);
	ep->progress_held = true;	/* until enabled */
	mrl_rma_tx_flags_set(ep, info->tx_attr ? info->tx_attr->op_flags : 0);
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->tx_iov_limit =
		mrl_tx_iov_limit(info->tx_attr ? info->tx_attr->iov_limit : 0);
	ep->msg_iov_limit =
		mrl_iov_limit(0, dom->rails[0].info->tx_attr->iov_limit);
	ep->rx_iov_limit =
		mrl_iov_limit(info->rx_attr ? info->rx_attr->iov_limit : 0,
			      dom->rails[0].info->rx_attr->iov_limit);
	for (r = 0; r < ep->nrails; r++) {
		ret = mrl_ep_open_rail(ep, r);
		if (ret)
			goto err;
	}
	if (dom->ctrl_own_ep) {
		ret = mrl_open_ctrl_ep(ep);
		if (ret)
			goto err;
	}
	ep->msg_striped = mrl_msg_striped_wanted(dom);
	/* every send and receive the core can hold, and the control ones */
	pool = dom->rails[0].info->tx_attr->size +
	       dom->rails[0].info->rx_attr->size + MRL_MSG_SPARE_REQS;
	ret = mrl_msg_init(ep, pool);
	if (ret)
		goto err;

	ep->ep_fid.fid.fclass = FI_CLASS_EP;
	ep->ep_fid.fid.context = context;
	ep->ep_fid.fid.ops = &mrl_ep_fi_ops;
	ep->ep_fid.ops = &mrl_ep_base_ops;
	ep->ep_fid.cm = &mrl_cm_ops;
	ep->ep_fid.msg = &mrl_msg_ops;
	ep->ep_fid.rma = &mrl_rma_ops;
	ep->ep_fid.tagged = &mrl_tagged_ops;
	ep->ep_fid.atomic = &mrl_atomic_ops;
	mrl_domain_hold(dom);
	*ep_out = &ep->ep_fid;
	return 0;
err:
	mrl_ep_close_rails(ep);
	mrl_msg_fini(ep);
	fi_freeinfo(ep->info);
	free(ep);
	return ret;
}
