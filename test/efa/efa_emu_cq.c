/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * efa_emu completion queue: tcp's CQ underneath; each core completion is
 * turned into the user operation's (one for both halves of a write), CQ
 * data cut to the 4 bytes efa carries, and held for FI_EFA_EMU_DELAY_US.
 */
#include <stdlib.h>
#include <string.h>

#include "efa_emu.h"

#define EMU_CORE_BATCH	16

void emu_cq_push(struct emu_cq *cq, struct emu_comp *c)
{
	c->ready_ns = emu_now_ns() + (uint64_t) emu_knobs.delay_us * 1000;
	c->next = NULL;
	*cq->tail = c;
	cq->tail = &c->next;
}

static struct emu_comp *new_comp(fi_addr_t src)
{
	struct emu_comp *c = calloc(1, sizeof(*c));

	if (c)
		c->src = src;
	return c;
}

/* One core operation of req finished; the last one completes the user's. */
void emu_req_done(struct emu_req *req, const struct fi_cq_tagged_entry *e,
		  fi_addr_t src)
{
	struct emu_comp *c;

	if (--req->pending > 0)
		return;
	if (req->bounce)
		emu_hmem_req_done(req, e);
	if (req->cq && (c = new_comp(src))) {
		c->e.op_context = req->context;
		c->e.flags = req->flags;
		c->e.len = req->len;
		c->err = req->err;
		c->prov_errno = req->prov_errno;
		if (e && (req->flags & FI_RECV)) {
			c->e.flags = e->flags;
			c->e.len = e->len;
			c->e.buf = e->buf;
			c->e.data = e->data & 0xffffffffu;
			c->e.tag = e->tag;
		}
		emu_cq_push(req->cq, c);
		if (req->hold_until_ns > c->ready_ns)
			c->ready_ns = req->hold_until_ns;
	}
	emu_req_free(req);
}

static void core_entry(struct emu_cq *cq, const struct fi_cq_tagged_entry *e,
		       fi_addr_t src)
{
	struct emu_comp *c;

	struct emu_req *req = e->op_context;

	if (req && req->done) {
		req->done(req, e, src, 0);
		return;
	}
	if (req) {
		emu_req_done(req, e, src);
		return;
	}
	/* No context: a peer's write with CQ data (32 bits, and the whole
	 * write's length: emu_wire_data) */
	c = new_comp(src);
	if (!c)
		return;
	c->e = *e;
	if (e->flags & FI_REMOTE_CQ_DATA)
		c->e.len = e->data >> 32;
	c->e.data &= 0xffffffffu;
	emu_cq_push(cq, c);
}

static void core_error(struct emu_cq *cq)
{
	struct fi_cq_err_entry err = { 0 };
	struct emu_req *req;
	struct emu_comp *c;

	if (fi_cq_readerr(cq->core, &err, 0) != 1)
		return;
	req = err.op_context;
	if (req && req->done) {
		req->done(req, NULL, FI_ADDR_NOTAVAIL, err.err ? err.err : FI_EIO);
		return;
	}
	if (req) {
		if (!req->err) {
			req->err = err.err ? err.err : FI_EIO;
			req->prov_errno = err.prov_errno;
		}
		emu_req_done(req, NULL, FI_ADDR_NOTAVAIL);
		return;
	}
	c = new_comp(FI_ADDR_NOTAVAIL);
	if (!c)
		return;
	c->e.flags = err.flags;
	c->e.data = err.data & 0xffffffffu;
	c->err = err.err ? err.err : FI_EIO;
	c->prov_errno = err.prov_errno;
	emu_cq_push(cq, c);
}

/* Post what endpoints held back, then drain the core. */
static void progress(struct emu_cq *cq)
{
	struct fi_cq_tagged_entry e[EMU_CORE_BATCH];
	fi_addr_t src[EMU_CORE_BATCH];
	ssize_t n, i;
	int k;

	for (k = 0; k < cq->neps; k++)
		emu_ep_flush(cq->eps[k]);
	do {
		n = fi_cq_readfrom(cq->core, e, EMU_CORE_BATCH, src);
		if (n == -FI_ENOSYS) {
			n = fi_cq_read(cq->core, e, EMU_CORE_BATCH);
			for (i = 0; i < n; i++)
				src[i] = FI_ADDR_NOTAVAIL;
		}
		for (i = 0; i < n; i++)
			core_entry(cq, &e[i], src[i]);
		if (n == -FI_EAVAIL)
			core_error(cq);
	} while (n == EMU_CORE_BATCH || n == -FI_EAVAIL);
}

static void copy_out(struct emu_cq *cq, void *buf, size_t i,
		     const struct emu_comp *c)
{
	switch (cq->format) {
	case FI_CQ_FORMAT_CONTEXT:
		((struct fi_cq_entry *) buf)[i].op_context = c->e.op_context;
		break;
	case FI_CQ_FORMAT_MSG:
		memcpy(&((struct fi_cq_msg_entry *) buf)[i], &c->e,
		       sizeof(struct fi_cq_msg_entry));
		break;
	case FI_CQ_FORMAT_DATA:
		memcpy(&((struct fi_cq_data_entry *) buf)[i], &c->e,
		       sizeof(struct fi_cq_data_entry));
		break;
	default:
		((struct fi_cq_tagged_entry *) buf)[i] = c->e;
		break;
	}
}

static bool ready(const struct emu_comp *c)
{
	return c && ((!emu_knobs.delay_us && !emu_knobs.fail_stall) ||
		     c->ready_ns <= emu_now_ns());
}

static struct emu_comp *pop(struct emu_cq *cq)
{
	struct emu_comp *c = cq->head;

	cq->head = c->next;
	if (!cq->head)
		cq->tail = &cq->head;
	return c;
}

static ssize_t cq_readfrom(struct fid_cq *fid, void *buf, size_t count,
			   fi_addr_t *src)
{
	struct emu_cq *cq = emu_container_of(fid, struct emu_cq, cq_fid);
	struct emu_comp *c;
	size_t n = 0;

	pthread_mutex_lock(&cq->domain->lock);
	progress(cq);
	while (n < count && ready(cq->head) && !cq->head->err) {
		c = pop(cq);
		copy_out(cq, buf, n, c);
		if (src)
			src[n] = c->src;
		n++;
		free(c);
	}
	if (!n && ready(cq->head) && cq->head->err) {
		pthread_mutex_unlock(&cq->domain->lock);
		return -FI_EAVAIL;
	}
	pthread_mutex_unlock(&cq->domain->lock);
	return n ? (ssize_t) n : -FI_EAGAIN;
}

static ssize_t cq_read(struct fid_cq *fid, void *buf, size_t count)
{
	return cq_readfrom(fid, buf, count, NULL);
}

static ssize_t cq_readfrom_api(struct fid_cq *fid, void *buf, size_t count,
			       fi_addr_t *src)
{
	if (emu_knobs.no_readfrom)
		return -FI_ENOSYS;
	return cq_readfrom(fid, buf, count, src);
}

static ssize_t cq_readerr(struct fid_cq *fid, struct fi_cq_err_entry *out,
			  uint64_t flags)
{
	struct emu_cq *cq = emu_container_of(fid, struct emu_cq, cq_fid);
	struct emu_comp *c;

	pthread_mutex_lock(&cq->domain->lock);
	if (!ready(cq->head) || !cq->head->err) {
		pthread_mutex_unlock(&cq->domain->lock);
		return -FI_EAGAIN;
	}
	c = pop(cq);
	pthread_mutex_unlock(&cq->domain->lock);
	out->op_context = c->e.op_context;
	out->flags = c->e.flags;
	out->len = c->e.len;
	out->buf = c->e.buf;
	out->data = c->e.data;
	out->tag = c->e.tag;
	out->olen = 0;
	out->err = c->err;
	out->prov_errno = c->prov_errno;
	out->err_data = NULL;
	out->err_data_size = 0;
	free(c);
	return 1;
}

static const char *cq_strerror(struct fid_cq *fid, int prov_errno,
			       const void *err_data, char *buf, size_t len)
{
	return fi_strerror(prov_errno);
}

static int cq_close(struct fid *fid)
{
	struct emu_cq *cq = emu_container_of(fid, struct emu_cq, cq_fid.fid);
	int ret;

	if (cq->neps)
		return -FI_EBUSY;
	ret = fi_close(&cq->core->fid);
	if (ret)
		return ret;
	while (cq->head)
		free(pop(cq));
	free(cq);
	return 0;
}

static struct fi_ops cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cq_close,
	.bind = (void *) emu_nosys,
	.control = (void *) emu_nosys,
	.ops_open = (void *) emu_nosys,
};

static ssize_t cq_nosys(void)
{
	return -FI_ENOSYS;
}

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom_api,
	.readerr = cq_readerr,
	.sread = (void *) cq_nosys,
	.sreadfrom = (void *) cq_nosys,
	.signal = (void *) emu_nosys,
	.strerror = cq_strerror,
};

int emu_cq_open(struct fid_domain *fid, struct fi_cq_attr *attr,
		struct fid_cq **out, void *context)
{
	struct emu_domain *dom = emu_container_of(fid, struct emu_domain,
						  domain_fid);
	struct fi_cq_attr core_attr = { .size = attr->size,
					.format = FI_CQ_FORMAT_TAGGED };
	struct emu_cq *cq;
	int ret;

	if (attr->wait_obj != FI_WAIT_NONE) {
		EMU_WARN(FI_LOG_CQ, "wait objects are not emulated\n");
		return -FI_ENOSYS;
	}
	if (attr->format > FI_CQ_FORMAT_TAGGED)
		return -FI_EINVAL;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	ret = fi_cq_open(dom->core_domain, &core_attr, &cq->core, NULL);
	if (ret) {
		free(cq);
		return ret;
	}
	cq->domain = dom;
	cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ?
		     FI_CQ_FORMAT_CONTEXT : attr->format;
	cq->tail = &cq->head;
	cq->cq_fid.fid.fclass = FI_CLASS_CQ;
	cq->cq_fid.fid.context = context;
	cq->cq_fid.fid.ops = &cq_fi_ops;
	cq->cq_fid.ops = &cq_ops;
	*out = &cq->cq_fid;
	return 0;
}
