/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * efa_emu: provider entry, knobs, fi_getinfo, fabric, domain and memory
 * registration.  Attribute values cite libfabric v2.6.0's prov/efa/src
 * (docs/efa.md has the line numbers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "efa_emu.h"

struct emu_knobs emu_knobs;
struct emu_nic emu_nics[EMU_MAX_NICS];
int emu_nnics;

int emu_nosys(void)
{
	return -FI_ENOSYS;
}

uint64_t emu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* ---- knobs and NICs ------------------------------------------------------ */

/* "79=lo,80=lo": NIC rdmap79s0 carried by the core's domain lo. */
static void parse_nics(const char *list)
{
	char *copy = strdup(list), *tok, *save, *eq;
	unsigned bus, slot;
	int n;

	emu_nnics = 0;
	for (tok = copy ? strtok_r(copy, ",", &save) : NULL;
	     tok && emu_nnics < EMU_MAX_NICS; tok = strtok_r(NULL, ",", &save)) {
		eq = strchr(tok, '=');
		slot = 0;
		n = eq ? sscanf(tok, "%us%u", &bus, &slot) : 0;
		if (n < 1 || bus > 255 || slot > 31 || !eq[1] ||
		    strlen(eq + 1) >= sizeof(emu_nics[0].core_domain)) {
			EMU_WARN(FI_LOG_CORE, "FI_EFA_EMU_NICS: '%s' is not "
				 "<decimal bus>[s<slot>]=<core domain>: "
				 "skipped\n", tok);
			continue;
		}
		snprintf(emu_nics[emu_nnics].domain, sizeof(emu_nics[0].domain),
			 "rdmap%us%u-rdm", bus, slot);
		strcpy(emu_nics[emu_nnics].core_domain, eq + 1);
		emu_nics[emu_nnics].bus = bus;
		emu_nics[emu_nnics].slot = slot;
		emu_nnics++;
	}
	free(copy);
}

static void read_knobs(void)
{
	size_t max_rma = 0;
	char *mode = NULL;

	fi_param_define(&emu_prov, "emu_nics", FI_PARAM_STRING,
			"Emulated NICs as <decimal PCI bus>[s<slot>]=<core "
			"domain>, NIC rdmap<bus>s<slot> at PCI 0000:<bus>:"
			"<slot>.0 (default 79=lo,80=lo,81=lo,82=lo: the NICs "
			"of GPU 0 in test/topo's p5.xml, all on loopback)");
	fi_param_define(&emu_prov, "emu_core", FI_PARAM_STRING,
			"Core provider carrying the emulated NICs (default tcp; "
			"net on libfabric 1.x)");
	fi_param_define(&emu_prov, "emu_max_rma", FI_PARAM_SIZE_T,
			"efa-direct's largest RMA (max_rdma_size; default 1 GiB)");
	fi_param_define(&emu_prov, "emu_reorder_us", FI_PARAM_INT,
			"Place the packets of a write out of order (those "
			"past its middle first), and hold every other write up "
			"to this long so that later ones land first (default "
			"300; 0: in order)");
	fi_param_define(&emu_prov, "emu_fail_nic", FI_PARAM_STRING,
			"Fault: the NIC (decimal PCI bus) whose transmits fail");
	fi_param_define(&emu_prov, "emu_fail_after", FI_PARAM_INT,
			"Fault: transmits that succeed on that NIC (0-byte RMA not "
			"counted) before every "
			"later one completes with FI_EIO (default 0)");
	fi_param_define(&emu_prov, "emu_fail_ms", FI_PARAM_INT,
			"Fault: the NIC works again this long after its first "
			"faulty transmit (default 0: never)");
	fi_param_define(&emu_prov, "emu_fail_mode", FI_PARAM_STRING,
			"Fault: error (transmits complete with FI_EIO, the "
			"default), stall (they are carried out but complete "
			"only when the fault ends, or at close) or refuse "
			"(every post is refused with -FI_EAGAIN)");
	fi_param_define(&emu_prov, "emu_fail_start", FI_PARAM_STRING,
			"Fault: what transmit begins it, once FAIL_AFTER are "
			"done: bytes (one that carries bytes, the default) or "
			"fence (a 0-byte RMA, as multirail flushes a rail with)");
	fi_param_define(&emu_prov, "emu_eagain_every", FI_PARAM_INT,
			"Fault: every Nth post starts a burst of -FI_EAGAIN "
			"(default 0: never)");
	fi_param_define(&emu_prov, "emu_eagain_burst", FI_PARAM_INT,
			"Fault: posts refused with -FI_EAGAIN per burst "
			"(default 3)");
	fi_param_define(&emu_prov, "emu_eagain_nic", FI_PARAM_STRING,
			"Fault: the EAGAIN bursts on this NIC (decimal PCI "
			"bus) only (default: every NIC)");
	fi_param_define(&emu_prov, "emu_delay_us", FI_PARAM_INT,
			"Fault: every completion is held this long (default 0)");
	fi_param_define(&emu_prov, "emu_opt_refuse", FI_PARAM_STRING,
			"The NIC (decimal PCI bus) whose endpoints refuse "
			"efa's bool options (fi_setopt: -FI_EOPNOTSUPP), as a "
			"device without them");
	fi_param_define(&emu_prov, "emu_no_readfrom", FI_PARAM_BOOL,
			"CQs answer fi_cq_readfrom with -FI_ENOSYS and no "
			"FI_SOURCE is offered (default 0)");

	emu_knobs.nics = "79=lo,80=lo,81=lo,82=lo";
	fi_param_get_str(&emu_prov, "emu_nics", &emu_knobs.nics);
	/* 1.x: net, not tcp;ofi_rxm, whose rxm cannot open while FI_PROVIDER
	 * hides tcp (FI_PROVIDER="multirail;efa") */
	emu_knobs.core = FI_MAJOR_VERSION >= 2 ? "tcp" : "net";
	fi_param_get_str(&emu_prov, "emu_core", &emu_knobs.core);
	emu_knobs.max_rma = 1ull << 30;
	if (!fi_param_get_size_t(&emu_prov, "emu_max_rma", &max_rma) &&
	    max_rma >= 4096)
		emu_knobs.max_rma = max_rma;
	emu_knobs.reorder_us = 300;
	fi_param_get_int(&emu_prov, "emu_reorder_us", &emu_knobs.reorder_us);
	fi_param_get_str(&emu_prov, "emu_fail_nic", &emu_knobs.fail_nic);
	fi_param_get_int(&emu_prov, "emu_fail_after", &emu_knobs.fail_after);
	fi_param_get_int(&emu_prov, "emu_fail_ms", &emu_knobs.fail_ms);
	fi_param_get_str(&emu_prov, "emu_fail_mode", &mode);
	emu_knobs.fail_stall = mode && !strcmp(mode, "stall");
	emu_knobs.fail_refuse = mode && !strcmp(mode, "refuse");
	mode = NULL;
	fi_param_get_str(&emu_prov, "emu_fail_start", &mode);
	emu_knobs.fail_on_fence = mode && !strcmp(mode, "fence");
	fi_param_get_int(&emu_prov, "emu_eagain_every",
			 &emu_knobs.eagain_every);
	emu_knobs.eagain_burst = 3;
	fi_param_get_int(&emu_prov, "emu_eagain_burst",
			 &emu_knobs.eagain_burst);
	fi_param_get_str(&emu_prov, "emu_eagain_nic", &emu_knobs.eagain_nic);
	fi_param_get_int(&emu_prov, "emu_delay_us", &emu_knobs.delay_us);
	fi_param_get_str(&emu_prov, "emu_opt_refuse",
			 &emu_knobs.opt_refuse_nic);
	fi_param_get_bool(&emu_prov, "emu_no_readfrom",
			  &emu_knobs.no_readfrom);
	parse_nics(emu_knobs.nics);
	emu_hmem_init();
}

/* ---- fi_getinfo -------------------------------------------------------------- */

#define EMU_DIRECT_CAPS (FI_MSG | FI_RMA | FI_READ | FI_WRITE | \
			 FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV | \
			 FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM)
/* efa's also has FI_ATOMIC and FI_MULTI_RECV, which tcp cannot carry here. */
#define EMU_RDM_CAPS (EMU_DIRECT_CAPS | FI_TAGGED | FI_DIRECTED_RECV)

/* FI_MR_BASIC's bits on 1.x (2.x deprecated the names). */
#define EMU_MR_BASIC	(1 << 0)
#define EMU_MR_BASIC_MAP (FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR)

static bool fits(size_t ours, size_t asked)
{
	return !asked || asked <= ours;
}

static uint64_t hints_mr_mode(const struct fi_info *h)
{
	uint64_t m = h->domain_attr->mr_mode;

	return (m & EMU_MR_BASIC) ? (m | EMU_MR_BASIC_MAP) : m;
}

/* Why our entry does not meet the hints, or NULL. */
static const char *miss(const struct fi_info *fi, const struct fi_info *h,
			uint32_t version)
{
	uint64_t need;

	if (!h)
		return NULL;
	if ((h->caps & fi->caps) != h->caps)
		return "caps";
	if ((fi->mode & ~h->mode) && h->mode != 0)
		return "mode (FI_CONTEXT2)";
	if (!h->mode && fi->mode)
		return "mode (FI_CONTEXT2)";
	if (h->ep_attr && h->ep_attr->type != FI_EP_UNSPEC &&
	    h->ep_attr->type != FI_EP_RDM)
		return "endpoint type";
	if (h->ep_attr && !fits(fi->ep_attr->max_msg_size,
				h->ep_attr->max_msg_size))
		return "max_msg_size";
	if (h->fabric_attr && h->fabric_attr->name &&
	    strcasecmp(h->fabric_attr->name, fi->fabric_attr->name))
		return "fabric name";
	if (h->domain_attr) {
		if (h->domain_attr->name &&
		    strcmp(h->domain_attr->name, fi->domain_attr->name))
			return "domain name";
		need = fi->domain_attr->mr_mode;
		if (FI_VERSION_GE(version, FI_VERSION(1, 5)) &&
		    (hints_mr_mode(h) & need) != need)
			return "mr_mode";
		if (!fits(fi->domain_attr->cq_data_size,
			  h->domain_attr->cq_data_size) ||
		    !fits(fi->domain_attr->mr_key_size,
			  h->domain_attr->mr_key_size) ||
		    !fits(fi->domain_attr->mr_iov_limit,
			  h->domain_attr->mr_iov_limit))
			return "domain limits";
	}
	if (h->tx_attr) {
		if (!fits(fi->tx_attr->iov_limit, h->tx_attr->iov_limit) ||
		    !fits(fi->tx_attr->rma_iov_limit,
			  h->tx_attr->rma_iov_limit) ||
		    !fits(fi->tx_attr->inject_size, h->tx_attr->inject_size))
			return "tx limits";
		if (h->tx_attr->msg_order & ~fi->tx_attr->msg_order)
			return "msg_order";
		if (h->tx_attr->op_flags & ~fi->tx_attr->op_flags)
			return "tx op_flags";
	}
	if (h->rx_attr && (h->rx_attr->msg_order & ~fi->rx_attr->msg_order))
		return "msg_order";
	return NULL;
}

/*
 * efa_prov_info.c: efa-direct passes the device straight through (mode
 * FI_CONTEXT2, FI_MR_LOCAL, 1 rma_iov, no ordering, no RMA inject); efa's
 * RDM protocol copies it and adds tagged messages and ordering of sends.
 */
static void set_attrs(struct fi_info *fi, bool direct,
		      const struct emu_nic *nic, const struct fi_info *h)
{
	const char *domain = nic->domain;
	uint64_t caps = direct ? EMU_DIRECT_CAPS : EMU_RDM_CAPS;
	size_t core_inject = fi->tx_attr->inject_size;

	if (emu_knobs.no_readfrom)
		caps &= ~FI_SOURCE;

	fi->caps = caps;
	fi->mode = direct ? FI_CONTEXT2 : 0;
	fi->tx_attr->caps = caps & ~(FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE |
				     FI_DIRECTED_RECV | FI_SOURCE);
	fi->rx_attr->caps = caps & ~(FI_SEND | FI_READ | FI_WRITE);
	fi->tx_attr->mode = fi->rx_attr->mode = fi->mode;
	fi->tx_attr->op_flags = FI_INJECT | FI_COMPLETION |
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
	fi->rx_attr->op_flags = FI_COMPLETION;
	fi->tx_attr->msg_order = fi->rx_attr->msg_order =
		direct ? 0 : FI_ORDER_SAS;
	fi->tx_attr->comp_order = fi->rx_attr->comp_order = 0;
	fi->tx_attr->iov_limit = fi->rx_attr->iov_limit =
		direct ? EMU_DIRECT_IOV_LIMIT : EMU_RDM_IOV_LIMIT;
	fi->tx_attr->rma_iov_limit = 1;
	fi->tx_attr->inject_size = direct ? EMU_DIRECT_INLINE : core_inject;
	fi->ep_attr->type = FI_EP_RDM;
	fi->ep_attr->protocol = FI_PROTO_EFA;
	fi->ep_attr->protocol_version = direct ? 1 : 4;
	if (direct)
		fi->ep_attr->max_msg_size = emu_knobs.max_rma;
	fi->ep_attr->max_order_raw_size = fi->ep_attr->max_order_war_size =
		fi->ep_attr->max_order_waw_size = 0;
	fi->ep_attr->tx_ctx_cnt = fi->ep_attr->rx_ctx_cnt = 1;

	free(fi->domain_attr->name);
	fi->domain_attr->name = strdup(domain);
	fi->domain_attr->threading = FI_THREAD_SAFE;
	fi->domain_attr->control_progress = fi->domain_attr->data_progress =
		direct ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
	fi->domain_attr->resource_mgmt = FI_RM_ENABLED;
	fi->domain_attr->av_type = FI_AV_TABLE;
	fi->domain_attr->mr_mode = EMU_MR_BASIC_MAP |
		(direct || (h && h->domain_attr &&
			    (h->domain_attr->mr_mode & FI_MR_LOCAL)) ?
		 FI_MR_LOCAL : 0);
	/* efa with GPUDirect: device memory, registered as such */
	if (h && (h->caps & FI_HMEM) && emu_hmem_offered()) {
		fi->caps |= FI_HMEM;
		fi->tx_attr->caps |= FI_HMEM;
		fi->rx_attr->caps |= FI_HMEM;
		fi->domain_attr->mr_mode |= FI_MR_HMEM;
	}
	fi->domain_attr->mr_key_size = EMU_KEY_SIZE;
	fi->domain_attr->cq_data_size = EMU_CQ_DATA_SIZE;
	fi->domain_attr->mr_iov_limit = 1;
	fi->domain_attr->max_ep_tx_ctx = fi->domain_attr->max_ep_rx_ctx = 1;
	fi->domain_attr->max_ep_stx_ctx = fi->domain_attr->max_ep_srx_ctx = 0;

	free(fi->fabric_attr->name);
	free(fi->fabric_attr->prov_name);
	fi->fabric_attr->name = strdup(direct ? EMU_FABRIC_DIRECT :
					       EMU_FABRIC_RDM);
	fi->fabric_attr->prov_name = NULL;	/* libfabric writes its name */
	fi->fabric_attr->prov_version = emu_prov.version;
	fi_freeinfo(fi->next);
	fi->next = NULL;
	if (fi->nic)	/* tcp's NIC is not the emulated one */
		fi_close(&fi->nic->fid);
	fi->nic = emu_nic_new(nic->bus, nic->slot);
}

/* What we ask tcp for one NIC: RDM, RMA, tagged, our keys, virtual addresses. */
static struct fi_info *core_hints(const struct emu_nic *nic,
				  const struct fi_info *h)
{
	struct fi_info *ch = fi_allocinfo();

	if (!ch)
		return NULL;
	ch->fabric_attr->prov_name = strdup(emu_knobs.core);
	ch->ep_attr->type = FI_EP_RDM;
	/* tcp's lo entries lack FI_REMOTE_COMM: ask neither */
	ch->caps = EMU_RDM_CAPS & ~(FI_SOURCE | FI_DIRECTED_RECV |
				    FI_LOCAL_COMM | FI_REMOTE_COMM);
	if (h)
		ch->caps |= h->caps & (FI_SOURCE | FI_DIRECTED_RECV);
	if (emu_hmem_active())	/* a staged RMA's target answers its sender */
		ch->caps |= FI_SOURCE;
	ch->mode = FI_CONTEXT | FI_CONTEXT2;
	ch->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				   FI_MR_ALLOCATED;
	ch->domain_attr->threading = FI_THREAD_SAFE;
	if (h && (h->addr_format == FI_SOCKADDR_IN ||
		  h->addr_format == FI_SOCKADDR_IN6 ||
		  h->addr_format == FI_SOCKADDR))
		ch->addr_format = h->addr_format;
	if (h && h->src_addr) {
		ch->src_addr = malloc(h->src_addrlen);
		if (ch->src_addr) {
			memcpy(ch->src_addr, h->src_addr, h->src_addrlen);
			ch->src_addrlen = h->src_addrlen;
			ch->addr_format = h->addr_format;
		}
	}
	if (!ch->fabric_attr->prov_name) {
		fi_freeinfo(ch);
		return NULL;
	}
	return ch;
}

static int core_getinfo(uint32_t version, const char *node,
			const char *service, uint64_t flags,
			const struct emu_nic *nic, const struct fi_info *h,
			struct fi_info **core)
{
	struct fi_info *ch = core_hints(nic, h), *all = NULL, *fi;
	int ret;

	if (!ch)
		return -FI_ENOMEM;
	/* by name among all: 1.x's rxm does not filter on the domain name */
	ret = fi_getinfo(version, node, service, flags | EMU_GETINFO_HIDDEN,
			 ch, &all);
	fi_freeinfo(ch);
	/* exactly the core named: "tcp" also brings "tcp;ofi_rxm" */
	for (fi = all; fi && (strcmp(fi->domain_attr->name, nic->core_domain) ||
			      strcmp(fi->fabric_attr->prov_name,
				     emu_knobs.core)); fi = fi->next)
		;
	if (!ret && !fi)
		ret = -FI_ENODATA;
	if (!ret) {
		*core = fi_dupinfo(fi);
		ret = *core ? 0 : -FI_ENOMEM;
	}
	fi_freeinfo(all);
	return ret;
}

/* The core's entry for the NIC an entry of ours names, for the domain and endpoints. */
int emu_core_info(uint32_t version, const struct emu_nic *nic,
		  const struct fi_info *ours, struct fi_info **core)
{
	return core_getinfo(version, NULL, NULL, 0, nic, ours, core);
}

int emu_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints,
		struct fi_info **info)
{
	struct fi_info *head = NULL, **tail = &head, *fi;
	const char *why = NULL;
	int f, n, ret;

	*info = NULL;
	/* efa_prov.c:94-98: every efa-direct entry first, then efa's. */
	for (f = 0; f < 2; f++) {
		for (n = 0; n < emu_nnics; n++) {
			ret = core_getinfo(version, node, service, flags,
					   &emu_nics[n], hints, &fi);
			if (ret)
				continue;
			set_attrs(fi, f == 0, &emu_nics[n], hints);
			why = miss(fi, hints, version);
			if (why) {
				fi_freeinfo(fi);
				continue;
			}
			*tail = fi;
			tail = &fi->next;
		}
	}
	if (!head) {
		if (why)
			EMU_INFO(FI_LOG_CORE, "hints ask for %s beyond efa's\n",
				 why);
		return -FI_ENODATA;
	}
	*info = head;
	return 0;
}

/* ---- fabric ------------------------------------------------------------------ */

static int fabric_close(struct fid *fid)
{
	free(emu_container_of(fid, struct emu_fabric, fabric_fid.fid));
	return 0;
}

static struct fi_ops fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fabric_close,
	.bind = (void *) emu_nosys,
	.control = (void *) emu_nosys,
	.ops_open = (void *) emu_nosys,
};

static struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = emu_domain_open,
	.passive_ep = (void *) emu_nosys,
	.eq_open = (void *) emu_nosys,
	.wait_open = (void *) emu_nosys,
	.trywait = (void *) emu_nosys,
};

static int emu_fabric_open(struct fi_fabric_attr *attr,
			   struct fid_fabric **fabric, void *context)
{
	struct emu_fabric *fab;

	if (!attr->name || (strcmp(attr->name, EMU_FABRIC_DIRECT) &&
			    strcmp(attr->name, EMU_FABRIC_RDM)))
		return -FI_ENODATA;
	fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -FI_ENOMEM;
	fab->direct = !strcmp(attr->name, EMU_FABRIC_DIRECT);
	fab->fabric_fid.fid.fclass = FI_CLASS_FABRIC;
	fab->fabric_fid.fid.context = context;
	fab->fabric_fid.fid.ops = &fabric_fi_ops;
	fab->fabric_fid.ops = &fabric_ops;
	*fabric = &fab->fabric_fid;
	return 0;
}

/* ---- memory registration ------------------------------------------------------- */

/* Domain locked. */
struct emu_mr *emu_mr_find(struct emu_domain *dom, uint64_t key)
{
	struct emu_mr *mr;

	for (mr = dom->mrs; mr && mr->mr_fid.key != key; mr = mr->next)
		;
	return mr;
}

static void mr_unlink(struct emu_mr *mr)
{
	struct emu_domain *dom = mr->domain;
	struct emu_mr **p;

	pthread_mutex_lock(&dom->lock);
	for (p = &dom->mrs; *p && *p != mr; p = &(*p)->next)
		;
	if (*p)
		*p = mr->next;
	pthread_mutex_unlock(&dom->lock);
}

struct emu_mr *emu_mr_of(struct emu_domain *dom, void *desc)
{
	struct emu_mr *mr = desc;

	return mr && mr->magic == EMU_MR_MAGIC && mr->domain == dom ? mr : NULL;
}

static int mr_close(struct fid *fid)
{
	struct emu_mr *mr = emu_container_of(fid, struct emu_mr, mr_fid.fid);
	int ret = mr->core ? fi_close(&mr->core->fid) : 0;

	if (ret)
		return ret;
	mr_unlink(mr);
	mr->magic = 0;
	free(mr);
	return 0;
}

static struct fi_ops mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mr_close,
	.bind = (void *) emu_nosys,
	.control = (void *) emu_nosys,
	.ops_open = (void *) emu_nosys,
};

uint64_t emu_random(struct emu_domain *dom)
{
	dom->rng ^= dom->rng << 13;
	dom->rng ^= dom->rng >> 7;
	dom->rng ^= dom->rng << 17;
	return dom->rng;
}

/*
 * A random 32-bit key, as the device's rkeys look to an application; bit
 * 31 says device memory (EMU_KEY_DEVICE), which the core never registers.
 */
static uint64_t next_key(struct emu_domain *dom)
{
	return ((emu_random(dom) >> 16) & 0x7fffffffu) ?: 1;
}

/*
 * tcp keeps the key we ask for: ours are random and may collide, so a
 * collision is tried again with another.  Domain locked.
 */
int emu_core_regattr(struct emu_domain *dom, struct fi_mr_attr *attr,
		     uint64_t flags, struct fid_mr **mr)
{
	int ret = -FI_ENOKEY, tries;

	for (tries = 0; tries < 16 && (ret == -FI_ENOKEY ||
				       ret == -FI_EKEYREJECTED); tries++) {
		attr->requested_key = next_key(dom);
		ret = fi_mr_regattr(dom->core_domain, attr, flags, mr);
	}
	return ret;
}

/*
 * A buffer of the provider's own that the core sends from or receives
 * into: registered where the core needs that (FI_MR_LOCAL), else *mr is
 * NULL.  Domain locked.
 */
int emu_core_reg_local(struct emu_domain *dom, void *buf, size_t len,
		       uint64_t access, struct fid_mr **mr)
{
	struct iovec iov = { buf, len ? len : 1 };
	struct fi_mr_attr attr = { .mr_iov = &iov, .iov_count = 1,
				   .access = access };

	*mr = NULL;
	if (!(dom->core_info->domain_attr->mr_mode & FI_MR_LOCAL))
		return 0;
	return emu_core_regattr(dom, &attr, 0, mr);
}

/* Device memory: no core registration, a key of its own.  Domain locked. */
static int device_key(struct emu_domain *dom, uint64_t *key)
{
	int tries;

	for (tries = 0; tries < 16; tries++) {
		*key = next_key(dom) | EMU_KEY_DEVICE;
		if (!emu_mr_find(dom, *key))
			return 0;
	}
	return -FI_ENOKEY;
}

/*
 * The registration's virtual range: its one iov, or its dma-buf's
 * (FI_MR_DMABUF, libfabric 1.20 on: the region starts base_addr + offset,
 * as aws-ofi-nccl registers GPU memory where the kernel can).  Device
 * memory alone: a dma-buf of host memory would need the core to take it.
 */
static int mr_range(const struct fi_mr_attr *attr, uint64_t flags,
		    char **buf, size_t *len)
{
	if (attr->iov_count != 1) {	/* efa_mr.c:68-72 */
		EMU_WARN(FI_LOG_MR, "iov_count %zu: efa registers one iov\n",
			 attr->iov_count);
		return -FI_EINVAL;
	}
#ifdef FI_MR_DMABUF
	if (flags & FI_MR_DMABUF) {
		if (!attr->dmabuf) {
			EMU_WARN(FI_LOG_MR, "FI_MR_DMABUF without a dma-buf\n");
			return -FI_EINVAL;
		}
		if (attr->iface == FI_HMEM_SYSTEM) {
			EMU_WARN(FI_LOG_MR, "a dma-buf of host memory: "
				 "device memory only\n");
			return -FI_EOPNOTSUPP;
		}
		*buf = (char *) attr->dmabuf->base_addr +
		       attr->dmabuf->offset;
		*len = attr->dmabuf->len;
		return 0;
	}
#else
	(void) flags;
#endif
	*buf = attr->mr_iov[0].iov_base;
	*len = attr->mr_iov[0].iov_len;
	return 0;
}

static int emu_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
			  uint64_t flags, struct fid_mr **out)
{
	struct emu_domain *dom = emu_container_of(fid, struct emu_domain,
						  domain_fid.fid);
	struct fi_mr_attr core_attr = *attr;
	struct iovec from_zero;
	struct emu_mr *mr;
	size_t len;
	char *buf;
	int ret;

	ret = mr_range(attr, flags, &buf, &len);
	if (ret)
		return ret;
	if (attr->iface != FI_HMEM_SYSTEM &&
	    (attr->iface != FI_HMEM_CUDA || !emu_hmem_offered())) {
		EMU_WARN(FI_LOG_MR, "device memory (iface %d): only CUDA's, "
			 "where a GPU is found (FI_EFA_EMU_HMEM)\n",
			 (int) attr->iface);
		return -FI_EOPNOTSUPP;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	if (attr->iface != FI_HMEM_SYSTEM) {
		pthread_mutex_lock(&dom->lock);
		ret = device_key(dom, &mr->mr_fid.key);
		pthread_mutex_unlock(&dom->lock);
		if (ret) {
			free(mr);
			return ret;
		}
		goto registered;
	}
	/*
	 * tcp's RDM endpoints address remote memory by offset from the
	 * registration's start, whatever mr_mode they were given; efa by
	 * virtual address.  A registration that starts at address 0 makes
	 * both the same: the core still refuses what lies beyond its end,
	 * but no longer what lies before its start.
	 */
	from_zero.iov_base = NULL;
	from_zero.iov_len = (uintptr_t) buf + len;
	core_attr.mr_iov = &from_zero;
	core_attr.offset = 0;
	pthread_mutex_lock(&dom->lock);
	ret = emu_core_regattr(dom, &core_attr, flags, &mr->core);
	pthread_mutex_unlock(&dom->lock);
	if (ret) {
		free(mr);
		return ret;
	}
	mr->mr_fid.key = fi_mr_key(mr->core);
registered:
	mr->magic = EMU_MR_MAGIC;
	mr->domain = dom;
	mr->buf = buf;
	mr->len = len;
	mr->access = attr->access;
	mr->iface = attr->iface;
	mr->mr_fid.fid.fclass = FI_CLASS_MR;
	mr->mr_fid.fid.context = attr->context;
	mr->mr_fid.fid.ops = &mr_fi_ops;
	mr->mr_fid.mem_desc = mr;
	pthread_mutex_lock(&dom->lock);
	mr->next = dom->mrs;
	dom->mrs = mr;
	pthread_mutex_unlock(&dom->lock);
	*out = &mr->mr_fid;
	return 0;
}

static int emu_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		       uint64_t access, uint64_t offset, uint64_t requested_key,
		       uint64_t flags, struct fid_mr **mr, void *context)
{
	struct fi_mr_attr attr = {
		.mr_iov = iov, .iov_count = count, .access = access,
		.offset = offset, .requested_key = requested_key,
		.context = context,
	};

	return emu_mr_regattr(fid, &attr, flags, mr);
}

static int emu_mr_reg(struct fid *fid, const void *buf, size_t len,
		      uint64_t access, uint64_t offset, uint64_t requested_key,
		      uint64_t flags, struct fid_mr **mr, void *context)
{
	struct iovec iov = { .iov_base = (void *) buf, .iov_len = len };

	return emu_mr_regv(fid, &iov, 1, access, offset, requested_key, flags,
			   mr, context);
}

static struct fi_ops_mr mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = emu_mr_reg,
	.regv = emu_mr_regv,
	.regattr = emu_mr_regattr,
};

/* ---- domain ---------------------------------------------------------------------- */

static int domain_close(struct fid *fid)
{
	struct emu_domain *dom = emu_container_of(fid, struct emu_domain,
						  domain_fid.fid);
	int ret = fi_close(&dom->core_domain->fid);

	if (ret)
		return ret;
	fi_close(&dom->core_fabric->fid);
	fi_freeinfo(dom->core_info);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return 0;
}

static struct fi_ops domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = domain_close,
	.bind = (void *) emu_nosys,
	.control = (void *) emu_nosys,
	.ops_open = (void *) emu_nosys,
};

/* The AV is tcp's own: addresses are the core's (sockaddr, not FI_ADDR_EFA). */
static int emu_av_open(struct fid_domain *fid, struct fi_av_attr *attr,
		       struct fid_av **av, void *context)
{
	struct emu_domain *dom = emu_container_of(fid, struct emu_domain,
						  domain_fid);
	struct fi_av_attr a = *attr;

	if (a.type == FI_AV_MAP)	/* efa_user_info.c:457-460 */
		a.type = FI_AV_TABLE;
	return fi_av_open(dom->core_domain, &a, av, context);
}

static int emu_cntr_open(struct fid_domain *fid, struct fi_cntr_attr *attr,
			 struct fid_cntr **cntr, void *context)
{
	EMU_WARN(FI_LOG_DOMAIN, "counters are not emulated\n");
	return -FI_ENOSYS;
}

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = emu_av_open,
	.cq_open = emu_cq_open,
	.endpoint = emu_ep_open,
	.scalable_ep = (void *) emu_nosys,
	.cntr_open = emu_cntr_open,
	.poll_open = (void *) emu_nosys,
	.stx_ctx = (void *) emu_nosys,
	.srx_ctx = (void *) emu_nosys,
	.query_atomic = (void *) emu_nosys,
	.query_collective = (void *) emu_nosys,
};

static const struct emu_nic *nic_named(const char *domain)
{
	int n;

	for (n = 0; domain && n < emu_nnics; n++)
		if (!strcmp(emu_nics[n].domain, domain))
			return &emu_nics[n];
	return NULL;
}

/* Is nic the one bus (decimal PCI bus, as the knobs name it) names? */
static bool nic_is(const struct emu_nic *nic, const char *bus)
{
	char want[48];

	snprintf(want, sizeof(want), "rdmap%ss0-rdm", bus);
	return !strcmp(want, nic->domain);
}

static bool nic_fails(const struct emu_nic *nic)
{
	return emu_knobs.fail_nic && nic_is(nic, emu_knobs.fail_nic);
}

int emu_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **out, void *context)
{
	struct emu_fabric *fab = emu_container_of(fabric, struct emu_fabric,
						  fabric_fid);
	const struct emu_nic *nic = nic_named(info->domain_attr->name);
	struct emu_domain *dom;
	int ret;

	if (!nic)
		return -FI_ENODATA;
	dom = calloc(1, sizeof(*dom));
	if (!dom)
		return -FI_ENOMEM;
	dom->direct = fab->direct;
	dom->nic = nic;
	dom->failing = nic_fails(nic);
	dom->eagain_here = !emu_knobs.eagain_nic ||
			   nic_is(nic, emu_knobs.eagain_nic);
	dom->opt_refuse = emu_knobs.opt_refuse_nic &&
			  nic_is(nic, emu_knobs.opt_refuse_nic);
	dom->mr_local = info->domain_attr->mr_mode & FI_MR_LOCAL;
	dom->rng = (uint64_t) getpid() * 0x9E3779B97F4A7C15ull ^ emu_now_ns();
	pthread_mutex_init(&dom->lock, NULL);
	ret = emu_core_info(fabric->api_version, nic, info, &dom->core_info);
	if (ret)
		goto err;
	ret = fi_fabric(dom->core_info->fabric_attr, &dom->core_fabric, NULL);
	if (ret)
		goto err;
	ret = fi_domain(dom->core_fabric, dom->core_info, &dom->core_domain,
			NULL);
	if (ret) {
		fi_close(&dom->core_fabric->fid);
		goto err;
	}
	dom->domain_fid.fid.fclass = FI_CLASS_DOMAIN;
	dom->domain_fid.fid.context = context;
	dom->domain_fid.fid.ops = &domain_fi_ops;
	dom->domain_fid.ops = &domain_ops;
	dom->domain_fid.mr = &mr_ops;
	*out = &dom->domain_fid;
	return 0;
err:
	fi_freeinfo(dom->core_info);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return ret;
}

/* ---- provider ---------------------------------------------------------------------- */

static void emu_cleanup(void)
{
	emu_hmem_fini();
}

struct fi_provider emu_prov = {
	.name = "efa",
	.version = FI_VERSION(0, 1),
	.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	.getinfo = emu_getinfo,
	.fabric = emu_fabric_open,
	.cleanup = emu_cleanup,
};

FI_EXT_INI
{
	read_knobs();
	return &emu_prov;
}
