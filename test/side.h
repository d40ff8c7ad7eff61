/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * One endpoint with a fabric, domain, AV (FI_AV_TABLE) and CQ (tagged
 * format) of its own, for tests that play several processes in one: a
 * multirail endpoint, or a plain core endpoint speaking to one.  Dies on
 * any failure (util.h).
 */
#ifndef MRL_TEST_SIDE_H
#define MRL_TEST_SIDE_H

#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "util.h"

#define API		FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

struct side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

/*
 * prov as fi_getinfo's hints name it; fabric and dom may be NULL.  The
 * endpoint bound, not enabled (options that must come first).
 */
static inline void open_side_unenabled(struct side *s, const char *prov,
				       const char *fabric, const char *dom,
				       uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	if (fabric)
		hints->fabric_attr->name = strdup(fabric);
	if (dom)
		hints->domain_attr->name = strdup(dom);
	CHK(fi_getinfo(API, NULL, NULL, 0, hints, &s->info));
	fi_freeinfo(hints);
	CHK(fi_fabric(s->info->fabric_attr, &s->fabric, NULL));
	CHK(fi_domain(s->fabric, s->info, &s->domain, NULL));
	CHK(fi_av_open(s->domain, &av_attr, &s->av, NULL));
	CHK(fi_cq_open(s->domain, &cq_attr, &s->cq, NULL));
	CHK(fi_endpoint(s->domain, s->info, &s->ep, NULL));
	CHK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
}

static inline void open_side(struct side *s, const char *prov,
			     const char *fabric, const char *dom,
			     uint64_t caps)
{
	open_side_unenabled(s, prov, fabric, dom, caps);
	CHK(fi_enable(s->ep));
}

static inline void close_side(struct side *s)
{
	CHK(fi_close(&s->ep->fid));
	CHK(fi_close(&s->av->fid));
	CHK(fi_close(&s->cq->fid));
	CHK(fi_close(&s->domain->fid));
	CHK(fi_close(&s->fabric->fid));
	fi_freeinfo(s->info);
}

#endif /* MRL_TEST_SIDE_H */
