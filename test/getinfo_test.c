/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_getinfo as applications drive it (stock fabtests did each of these):
 *   - every entry honours the hints it answers, or the answer is
 *     -FI_ENODATA: msg_order, progress, mr_mode (BASIC, SCALABLE, 0),
 *     sizes and limits, rx caps with FI_RMA (fabtests' getinfo_test);
 *   - FI_MR_RAW only with remote access; every FI_ATOMIC entry opens;
 *   - an entry fed back as hints (fi_dupinfo of a result, as fabtests'
 *     multi_ep does) finds the same provider again;
 *   - FI_SOURCE with a service and no node (fabtests -E): the wildcard
 *     entry of the core names no NIC, the endpoint opens, and rail 0's
 *     address carries the port asked for;
 *   - FI_LOCAL_COMM | FI_REMOTE_COMM asked (Open MPI, aws-ofi-nccl): the
 *     core is asked for them too.
 * Run under each selection spelling by getinfo.sh.  `getinfo_test nic`
 * (efa.sh, over the efa test provider): every entry carries its first
 * rail's NIC.
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS, and MRL_TEST_PROV (hints
 * prov_name; unset under FI_PROVIDER="multirail;<core>").
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "check.h"
#include "mrl.h"	/* struct mrl_addr_hdr */

#define API		FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define TEST_PORT	"9399"

static struct fi_info *base_hints(void)
{
	struct fi_info *h = fi_allocinfo();
	const char *prov = getenv("MRL_TEST_PROV");

	if (!h)
		exit(2);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_RMA;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_ENDPOINT;
	if (prov && *prov)
		h->fabric_attr->prov_name = strdup(prov);
	return h;
}

static bool ours(const struct fi_info *fi)
{
	return strstr(fi->fabric_attr->prov_name, "multirail") != NULL;
}

/* Ask; every entry must pass check(), or the answer must be ENODATA. */
static void expect_honoured(const char *what, struct fi_info *h,
			    bool (*ok)(const struct fi_info *,
				       const struct fi_info *))
{
	struct fi_info *info = NULL, *fi;
	int ret = fi_getinfo(API, NULL, NULL, 0, h, &info), bad = 0, n = 0;

	for (fi = ret ? NULL : info; fi; fi = fi->next, n++)
		bad += ours(fi) && !ok(fi, h);
	check(ret == -FI_ENODATA || (!ret && !bad),
	      "%s: ret %d, %d of %d entries break the hints", what, ret, bad,
	      n);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

static bool order_kept(const struct fi_info *fi, const struct fi_info *h)
{
	return (fi->tx_attr->msg_order & h->tx_attr->msg_order) ==
	       h->tx_attr->msg_order &&
	       (fi->rx_attr->msg_order & h->rx_attr->msg_order) ==
	       h->rx_attr->msg_order;
}

static bool progress_kept(const struct fi_info *fi, const struct fi_info *h)
{
	return fi->domain_attr->data_progress == h->domain_attr->data_progress;
}

static bool mr_mode_within(const struct fi_info *fi, const struct fi_info *h)
{
	return !(fi->domain_attr->mr_mode & ~h->domain_attr->mr_mode);
}

static bool sizes_fit(const struct fi_info *fi, const struct fi_info *h)
{
	return fi->domain_attr->cq_data_size >= h->domain_attr->cq_data_size &&
	       fi->tx_attr->iov_limit >= h->tx_attr->iov_limit;
}

static bool rx_rma(const struct fi_info *fi, const struct fi_info *h)
{
	return (fi->caps & FI_RMA) && (fi->rx_attr->caps & FI_RMA) &&
	       (fi->tx_attr->caps & FI_RMA);
}

static void hints_honoured(void)
{
	struct fi_info *h;
	uint64_t orders[] = { 1ULL << 0 /* RAR */, 1ULL << 1 /* RAW */,
			      1ULL << 3 /* WAR */, 1ULL << 8 /* SAS */ };
	size_t i;

	for (i = 0; i < sizeof(orders) / sizeof(orders[0]); i++) {
		h = base_hints();
		h->tx_attr->msg_order = h->rx_attr->msg_order = orders[i];
		expect_honoured("msg_order", h, order_kept);
	}
	h = base_hints();
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	expect_honoured("data_progress AUTO", h, progress_kept);
	h = base_hints();
	h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	expect_honoured("data_progress MANUAL", h, progress_kept);
	h = base_hints();
	h->domain_attr->mr_mode = MRL_MR_BASIC;
	expect_honoured("mr_mode FI_MR_BASIC", h, mr_mode_within);
	h = base_hints();
	h->domain_attr->mr_mode = MRL_MR_SCALABLE;
	expect_honoured("mr_mode FI_MR_SCALABLE", h, mr_mode_within);
	h = base_hints();
	h->domain_attr->mr_mode = 0;
	expect_honoured("mr_mode 0", h, mr_mode_within);
	h = base_hints();
	h->domain_attr->cq_data_size = 64;
	expect_honoured("cq_data_size 64", h, sizes_fit);
	h = base_hints();
	h->tx_attr->iov_limit = 1 << 20;
	expect_honoured("iov_limit 2^20", h, sizes_fit);
	h = base_hints();
	h->caps = FI_RMA;
	expect_honoured("caps FI_RMA in tx and rx", h, rx_rma);
}

/* A raw key only where keys matter: remote access (fabtests' pingpong
 * unmapped a key it never mapped when FI_MR_RAW came with FI_MSG alone). */
static void raw_keys_with_rma_only(void)
{
	uint64_t caps[] = { FI_MSG, FI_TAGGED, FI_MSG | FI_RMA, FI_RMA };
	struct fi_info *h, *info;
	size_t i;
	int ret;

	for (i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		h = base_hints();
		h->caps = caps[i];
		h->domain_attr->mr_mode |= FI_MR_RAW;
		info = NULL;
		ret = fi_getinfo(API, NULL, NULL, 0, h, &info);
		check(!ret && info && !(info->domain_attr->mr_mode & FI_MR_RAW) ==
		      !(caps[i] & FI_RMA), "caps 0x%llx, FI_MR_RAW allowed: "
		      "ret %d, FI_MR_RAW %s", (unsigned long long) caps[i], ret,
		      info && (info->domain_attr->mr_mode & FI_MR_RAW) ?
		      "given" : "not given");
		fi_freeinfo(info);
		fi_freeinfo(h);
	}
}

/*
 * Every entry opens: under FI_PROVIDER="multirail;tcp" a layered core
 * (tcp;ofi_rxm, the only tcp with atomics) cannot open, as libfabric hides
 * its base from ofi_rxm; such an entry must not be offered.
 */
static void atomic_entries_open(void)
{
	struct fi_info *h = base_hints(), *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	int ret;

	h->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	ret = fi_getinfo(API, NULL, NULL, 0, h, &info);
	fi_freeinfo(h);
	if (ret) {
		check(ret == -FI_ENODATA, "FI_ATOMIC: no entry (%d)", ret);
		return;
	}
	ret = fi_fabric(info->fabric_attr, &fabric, NULL);
	if (!ret)
		ret = fi_domain(fabric, info, &domain, NULL);
	check(!ret, "FI_ATOMIC entry over %s opens its domain: %d",
	      info->fabric_attr->name, ret);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	fi_freeinfo(info);
}

/* fabtests' multi_ep: the result, duplicated, is the next query's hints. */
static void entry_as_hints(void)
{
	struct fi_info *h = base_hints(), *info = NULL, *again = NULL;
	int ret = fi_getinfo(API, NULL, NULL, 0, h, &info);

	check(!ret && info && ours(info), "first query: %d (%s)", ret,
	      ret || !info ? "-" : info->fabric_attr->prov_name);
	if (ret || !info) {
		fi_freeinfo(h);
		return;
	}
	fi_freeinfo(h);
	h = fi_dupinfo(info);
	free(h->src_addr);
	h->src_addr = NULL;
	h->src_addrlen = 0;
	ret = fi_getinfo(API, "127.0.0.1", NULL, 0, h, &again);
	check(!ret && again && ours(again) &&
	      !strcmp(again->domain_attr->name, info->domain_attr->name),
	      "entry %s / %s as hints: %d, %s", info->fabric_attr->prov_name,
	      info->domain_attr->name, ret,
	      ret || !again ? "-" : again->domain_attr->name);
	fi_freeinfo(again);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* fabtests -E: FI_SOURCE, service only. */
static void wildcard_source(void)
{
	struct fi_info *h = base_hints(), *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_ep *ep = NULL;
	struct fid_av *av = NULL;
	struct fid_cq *cq = NULL;
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
	uint8_t name[4096];
	size_t len = sizeof(name);
	const struct mrl_addr_hdr *hdr = (const void *) name;
	const struct sockaddr_in *rail0 = (const void *) (hdr + 1);
	int ret;

	ret = fi_getinfo(API, NULL, TEST_PORT, FI_SOURCE, h, &info);
	fi_freeinfo(h);
	check(!ret && info && ours(info), "FI_SOURCE, port only: %d", ret);
	if (ret || !info)
		return;
	ret = fi_fabric(info->fabric_attr, &fabric, NULL);
	if (!ret)
		ret = fi_domain(fabric, info, &domain, NULL);
	check(!ret, "wildcard source: fabric and domain open on %s: %d",
	      info->domain_attr->name, ret);
	if (!ret)
		ret = fi_endpoint(domain, info, &ep, NULL);
	if (!ret)
		ret = fi_av_open(domain, &av_attr, &av, NULL);
	if (!ret)
		ret = fi_cq_open(domain, &cq_attr, &cq, NULL);
	if (!ret)
		ret = fi_ep_bind(ep, &av->fid, 0);
	if (!ret)
		ret = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_enable(ep);
	if (!ret)
		ret = fi_getname(&ep->fid, name, &len);
	check(!ret, "wildcard source: endpoint enabled and named: %d", ret);
	if (!ret && hdr->rail_addrlen == sizeof(*rail0) &&
	    rail0->sin_family == AF_INET)
		check(ntohs(rail0->sin_port) == atoi(TEST_PORT) &&
		      rail0->sin_addr.s_addr != htonl(INADDR_ANY),
		      "rail 0 is a NIC's address on port %d (asked %s)",
		      ntohs(rail0->sin_port), TEST_PORT);
	if (ep)
		fi_close(&ep->fid);
	if (cq)
		fi_close(&cq->fid);
	if (av)
		fi_close(&av->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	fi_freeinfo(info);
}

/*
 * Does the core of the hints spelling ("<core>;multirail") alone give
 * FI_LOCAL_COMM | FI_REMOTE_COMM on lo, in an entry's caps?  (1.17's rxm
 * over tcp does; 2.1's does not, its tcp on lo being local only.)
 */
static bool core_gives_comm(void)
{
	const char *prov = getenv("MRL_TEST_PROV");
	const char *end = prov ? strstr(prov, ";multirail") : NULL;
	uint64_t both = FI_LOCAL_COMM | FI_REMOTE_COMM;
	struct fi_info *h, *info = NULL, *fi;
	bool gives = false;

	if (!end)
		return false;
	h = base_hints();
	free(h->fabric_attr->prov_name);
	h->fabric_attr->prov_name = strndup(prov, (size_t) (end - prov));
	h->domain_attr->name = strdup("lo");
	h->caps |= both;
	/* 2.1's rxm answers with lo entries that lack FI_REMOTE_COMM */
	if (!fi_getinfo(API, NULL, NULL, 0, h, &info))
		for (fi = info; fi; fi = fi->next)
			gives |= (fi->caps & both) == both;
	fi_freeinfo(info);
	fi_freeinfo(h);
	return gives;
}

/*
 * Where the peers may be is asked as Open MPI's mtl and aws-ofi-nccl ask
 * it: the entries carry FI_LOCAL_COMM and FI_REMOTE_COMM, or (a core
 * without one of them: 1.17's net on lo has no FI_REMOTE_COMM) there are
 * none; and where the core alone gives them, so does multirail.
 */
static void comm_caps_asked(void)
{
	struct fi_info *h = base_hints(), *info = NULL, *fi;
	uint64_t both = FI_LOCAL_COMM | FI_REMOTE_COMM;
	int ret, n = 0, bad = 0;

	h->caps |= both;
	ret = fi_getinfo(API, NULL, NULL, 0, h, &info);
	for (fi = ret ? NULL : info; fi; fi = fi->next) {
		if (!ours(fi))
			continue;
		n++;
		bad += (fi->caps & both) != both;
	}
	check(!bad && (n || ret == -FI_ENODATA), "FI_LOCAL_COMM | "
	      "FI_REMOTE_COMM asked: %d entries, %d without both (%s)", n, bad,
	      ret ? fi_strerror(-ret) : "answered");
	check(n || !core_gives_comm(), "where the core alone gives both on "
	      "the rails' domain, multirail does: %d entries", n);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* The PCI bus in an efa domain name "rdmap<bus>s0-rdm[+...]", or -1. */
static int efa_bus(const char *domain)
{
	unsigned int bus;

	return sscanf(domain, "rdmap%us0", &bus) == 1 ? (int) bus : -1;
}

/*
 * MRL_TEST_NIC (over the efa test provider): every entry carries its first
 * rail's NIC, with the device, PCI bus and link attributes aws-ofi-nccl
 * reads, and fi_dupinfo copies it.
 */
static void entries_carry_nic(void)
{
	struct fi_info *h = base_hints(), *info = NULL, *fi, *dup;
	const struct fid_nic *nic;
	int n = 0, bad = 0, bus;

	check(!fi_getinfo(API, NULL, NULL, 0, h, &info), "fi_getinfo");
	for (fi = info; fi; fi = fi->next, n++) {
		nic = fi->nic;
		bus = efa_bus(fi->domain_attr->name);
		if (!nic || !nic->device_attr || !nic->device_attr->name ||
		    !nic->link_attr || !nic->link_attr->speed ||
		    !nic->bus_attr || nic->bus_attr->bus_type != FI_BUS_PCI ||
		    nic->bus_attr->attr.pci.bus_id != bus) {
			printf("  %s: no NIC, or not rail 0's (bus %d)\n",
			       fi->domain_attr->name, bus);
			bad++;
			continue;
		}
		dup = fi_dupinfo(fi);
		if (!dup || !dup->nic || !dup->nic->bus_attr ||
		    dup->nic->bus_attr->attr.pci.bus_id != bus) {
			printf("  %s: fi_dupinfo lost the NIC\n",
			       fi->domain_attr->name);
			bad++;
		}
		fi_freeinfo(dup);
	}
	check(n && !bad, "%d entries, each with its first rail's NIC (PCI "
	      "bus, device, link), kept by fi_dupinfo: %d without", n, bad);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1 && !strcmp(argv[1], "nic")) {
		entries_carry_nic();
		return check_failures ? 1 : 0;
	}
	printf("FI_PROVIDER=%s MRL_TEST_PROV=%s FI_MULTIRAIL_RAILS=%s\n",
	       getenv("FI_PROVIDER") ?: "(unset)",
	       getenv("MRL_TEST_PROV") ?: "(unset)",
	       getenv("FI_MULTIRAIL_RAILS") ?: "(unset)");
	hints_honoured();
	raw_keys_with_rma_only();
	atomic_entries_open();
	entry_as_hints();
	wildcard_source();
	comm_caps_asked();
	return check_failures ? 1 : 0;
}
