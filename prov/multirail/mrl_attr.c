/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_info templates: what we ask of the core, and what we offer on top of it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

#define MRL_CAPS (FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | \
		  FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | \
		  FI_MULTI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM | \
		  FI_DIRECTED_RECV | FI_HMEM | FI_ATOMIC)

/*
 * The core must give us RMA for striping and messages for control; tagged
 * messages only when the application asks (efa-direct has none: control
 * then takes an endpoint of its own, mrl_ctrl.c).
 */
#define MRL_CORE_CAPS (FI_MSG | FI_RMA | FI_READ | FI_WRITE | \
		       FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE)

/* The MR modes we know how to honour on the core's behalf. */
#define MRL_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | \
		      FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW | FI_MR_HMEM)

/*
 * "multirail/<core provider>[/<core fabric>]": the core fabric is named
 * where the core offers the same domains in several fabrics (efa:
 * efa-direct and efa), so that the rails open in the one fi_getinfo chose.
 * fabric gets "" when none is named.
 */
int mrl_parse_fabric_name(const char *name, char *core, size_t len,
			  char *fabric, size_t flen)
{
	size_t n = strlen(MRL_FABRIC_PREFIX), clen;
	const char *slash;

	if (strncmp(name, MRL_FABRIC_PREFIX, n) || !name[n])
		return -FI_EINVAL;
	name += n;
	slash = strchr(name, '/');
	clen = slash ? (size_t) (slash - name) : strlen(name);
	if (!clen || clen >= len || (slash && strlen(slash + 1) >= flen))
		return -FI_EINVAL;
	memcpy(core, name, clen);
	core[clen] = '\0';
	strcpy(fabric, slash ? slash + 1 : "");
	return 0;
}

/* "a+b+b" or "a,b,b" -> NULL-terminated array of names. */
int mrl_split_rails(const char *list, char ***names)
{
	char *copy, *tok, *save, **out;
	size_t n = 0;

	out = calloc(MRL_MAX_RAILS + 1, sizeof(*out));
	copy = strdup(list);
	if (!out || !copy) {
		free(out);
		free(copy);
		return -FI_ENOMEM;
	}
	for (tok = strtok_r(copy, "+,", &save); tok && n < MRL_MAX_RAILS;
	     tok = strtok_r(NULL, "+,", &save)) {
		out[n] = strdup(tok);
		if (!out[n++]) {
			free(copy);
			mrl_free_names(out);
			return -FI_ENOMEM;
		}
	}
	free(copy);
	if (!n) {
		free(out);
		return -FI_ENODATA;
	}
	*names = out;
	return 0;
}

void mrl_free_names(char **names)
{
	size_t i;

	for (i = 0; names && names[i]; i++)
		free(names[i]);
	free(names);
}

static void mrl_clear_str(char **s)
{
	free(*s);
	*s = NULL;
}

struct fi_info *mrl_core_hints(const struct fi_info *hints,
			       const char *core_name)
{
	struct fi_info *ch = hints ? fi_dupinfo(hints) : fi_allocinfo();

	if (!ch)
		return NULL;
	mrl_clear_str(&ch->fabric_attr->prov_name);
	mrl_clear_str(&ch->fabric_attr->name);
	mrl_clear_str(&ch->domain_attr->name);
	free(ch->src_addr);
	free(ch->dest_addr);
	ch->src_addr = ch->dest_addr = NULL;
	ch->src_addrlen = ch->dest_addrlen = 0;
	if (ch->addr_format != FI_SOCKADDR &&
	    ch->addr_format != FI_SOCKADDR_IN &&
	    ch->addr_format != FI_SOCKADDR_IN6)
		ch->addr_format = FI_FORMAT_UNSPEC;
	if (core_name) {
		ch->fabric_attr->prov_name = strdup(core_name);
		if (!ch->fabric_attr->prov_name) {
			fi_freeinfo(ch);
			return NULL;
		}
	}

	ch->ep_attr->type = FI_EP_RDM;
	/*
	 * Atomics pass through on rail 0: the core must do them if asked.
	 * Where the peers may be (FI_LOCAL_COMM, FI_REMOTE_COMM) is the
	 * core's to say: rxm reports them only when asked (Open MPI's mtl
	 * and aws-ofi-nccl ask), shm has no FI_REMOTE_COMM.
	 */
	ch->caps = (ch->caps & (FI_MULTI_RECV | FI_SOURCE | FI_HMEM |
				FI_DIRECTED_RECV | FI_ATOMIC | FI_TAGGED |
				FI_LOCAL_COMM | FI_REMOTE_COMM)) |
		   MRL_CORE_CAPS;
	/* Every context we give the core is a struct mrl_req_hdr. */
	ch->mode = FI_CONTEXT | FI_CONTEXT2;
	ch->tx_attr->mode = ch->rx_attr->mode = 0;
	ch->tx_attr->op_flags = 0;
	ch->rx_attr->op_flags = 0;
	ch->tx_attr->caps = ch->rx_attr->caps = 0;
	ch->tx_attr->msg_order = ch->rx_attr->msg_order = 0;
	ch->tx_attr->comp_order = ch->rx_attr->comp_order = 0;
	ch->tx_attr->iov_limit = ch->rx_attr->iov_limit = 0;
	ch->tx_attr->rma_iov_limit = 0;
	ch->tx_attr->inject_size = 0;
	ch->ep_attr->max_msg_size = 0;
	ch->ep_attr->mem_tag_format = 0;
	/* ours (MRL protocol version 1) mean nothing to the core */
	ch->ep_attr->protocol = FI_PROTO_UNSPEC;
	ch->ep_attr->protocol_version = 0;
	/*
	 * The application's MR modes (an API >= 1.5 mr_mode of 0 says it
	 * supports none, mrl_hints_miss refuses BASIC and SCALABLE);
	 * with no hints at all, every mode we can honour.
	 */
	if (hints && hints->domain_attr)
		ch->domain_attr->mr_mode = hints->domain_attr->mr_mode &
					   MRL_MR_MODES & ~FI_MR_RAW;
	else
		ch->domain_attr->mr_mode = MRL_MR_MODES & ~FI_MR_RAW &
					   ~FI_MR_HMEM;
	/*
	 * Under FI_THREAD_DOMAIN the application serialises every call on
	 * our domain, and each of ours into a core comes from one of them: the
	 * core may skip its locks too.  Other levels leave the core its own.
	 */
	ch->domain_attr->threading = hints && hints->domain_attr &&
		hints->domain_attr->threading == FI_THREAD_DOMAIN ?
		FI_THREAD_DOMAIN : FI_THREAD_UNSPEC;
	ch->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	ch->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	ch->domain_attr->resource_mgmt = FI_RM_UNSPEC;
	ch->tx_attr->size = ch->rx_attr->size = 0;
	ch->domain_attr->av_type = FI_AV_TABLE;
	ch->domain_attr->cq_data_size = 0;
	ch->domain_attr->mr_key_size = 0;
	ch->domain_attr->caps = ch->domain_attr->mode = 0;
	return ch;
}

/*
 * FI_MR_RAW only when the application accepts it: raw keys reach every
 * rail at once.  Otherwise our 64-bit keys name a registration and the
 * initiator learns the other rails' keys over the control channel.
 */
uint64_t mrl_user_mr_mode(const struct fi_info *hints, uint64_t core_mode,
			  uint64_t caps)
{
	uint64_t mode = core_mode & MRL_MR_MODES & ~FI_MR_RAW;

	/*
	 * Keys only matter to remote access: without it, no raw key (an
	 * application then needs no fi_mr_map_raw/unmap_key, and fabtests'
	 * pingpong unmapped a key it never mapped).
	 */
	if (hints && hints->domain_attr &&
	    (hints->domain_attr->mr_mode & FI_MR_RAW) &&
	    (caps & (FI_RMA | FI_ATOMIC)))
		mode |= FI_MR_RAW;
	return mode;
}

static uint64_t mrl_order_we_keep(uint64_t order)
{
	/* Messages stay on one rail; RMA spreads over all of them. */
	return order & (FI_ORDER_SAS);
}

void mrl_fill_info(struct fi_info *fi, const struct fi_info *core,
		   const struct fi_info *hints)
{
	uint64_t caps = core->caps & MRL_CAPS;
	size_t iov_limit;

	if (hints && hints->caps)
		caps &= hints->caps | FI_LOCAL_COMM | FI_REMOTE_COMM |
			FI_READ | FI_WRITE | FI_SEND | FI_RECV |
			FI_REMOTE_READ | FI_REMOTE_WRITE;
	fi->caps = caps;
	fi->mode = 0;
	fi->addr_format = FI_FORMAT_UNSPEC;

	*fi->tx_attr = *core->tx_attr;
	fi->tx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_RMA | FI_READ |
				    FI_WRITE | FI_SEND | FI_HMEM | FI_ATOMIC);
	fi->tx_attr->mode = 0;
	fi->tx_attr->op_flags = hints ? hints->tx_attr->op_flags : 0;
	fi->tx_attr->msg_order = mrl_order_we_keep(core->tx_attr->msg_order);
	fi->tx_attr->comp_order = MRL_ORDER_NONE;
	/* RMA cuts many iovs into pieces; a send of more than the core
	 * takes goes from a copy (mrl_msg.c) */
	fi->tx_attr->iov_limit = MRL_SG_IOV_MAX;
	fi->tx_attr->rma_iov_limit = MRL_SG_IOV_MAX;

	*fi->rx_attr = *core->rx_attr;
	fi->rx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_RMA | FI_RECV |
				    FI_REMOTE_READ | FI_REMOTE_WRITE |
				    FI_MULTI_RECV | FI_SOURCE |
				    FI_DIRECTED_RECV | FI_HMEM | FI_ATOMIC);
	fi->rx_attr->mode = 0;
	fi->rx_attr->op_flags = hints ? hints->rx_attr->op_flags : 0;
	fi->rx_attr->msg_order = mrl_order_we_keep(core->rx_attr->msg_order);
	fi->rx_attr->comp_order = MRL_ORDER_NONE;
	iov_limit = core->rx_attr->iov_limit;
	fi->rx_attr->iov_limit = iov_limit < MRL_IOV_LIMIT ?
				 iov_limit : MRL_IOV_LIMIT;

	*fi->ep_attr = *core->ep_attr;
	fi->ep_attr->type = FI_EP_RDM;
	fi->ep_attr->protocol = FI_PROTO_UNSPEC;
	fi->ep_attr->protocol_version = MRL_PROTO_VERSION;
	fi->ep_attr->mem_tag_format = core->ep_attr->mem_tag_format &
				      ~MRL_CTRL_TAG;
	fi->ep_attr->tx_ctx_cnt = fi->ep_attr->rx_ctx_cnt = 1;
	fi->ep_attr->auth_key = NULL;
	fi->ep_attr->auth_key_size = 0;

	*fi->domain_attr = *core->domain_attr;
	fi->domain_attr->domain = NULL;
	fi->domain_attr->name = NULL;
	fi->domain_attr->auth_key = NULL;
	fi->domain_attr->auth_key_size = 0;
	/* we lock in every call, which serves any level asked for */
	fi->domain_attr->threading = hints && hints->domain_attr &&
				     hints->domain_attr->threading ?
				     hints->domain_attr->threading :
				     FI_THREAD_SAFE;
	fi->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	/*
	 * As the cores do: UNSPEC unless asked.  A program told TABLE may
	 * assume fi_addr 0 is its peer (fabtests' multi_client does, after
	 * re-opening its AV), which is not ours to promise.
	 */
	fi->domain_attr->av_type = hints && hints->domain_attr->av_type ?
				   hints->domain_attr->av_type : FI_AV_UNSPEC;
	fi->domain_attr->mr_mode = mrl_user_mr_mode(hints,
						    core->domain_attr->mr_mode,
						    caps);
	fi->domain_attr->mr_key_size = sizeof(uint64_t);
	fi->domain_attr->tx_ctx_cnt = fi->domain_attr->rx_ctx_cnt = 1;
	fi->domain_attr->max_ep_tx_ctx = fi->domain_attr->max_ep_rx_ctx = 1;
	fi->domain_attr->max_ep_stx_ctx = fi->domain_attr->max_ep_srx_ctx = 0;
	fi->domain_attr->caps = core->domain_attr->caps &
				(FI_LOCAL_COMM | FI_REMOTE_COMM);
	fi->domain_attr->mode = 0;
	fi->domain_attr->mr_iov_limit = 1;

	fi->fabric_attr->fabric = NULL;
	fi->fabric_attr->prov_version = MRL_VERSION;
	fi->fabric_attr->api_version = core->fabric_attr->api_version;
}

static bool mrl_has_all(uint64_t have, uint64_t want)
{
	return (have & want) == want;
}

/* Hinted limits: 0 asks nothing; anything else must fit under ours. */
static bool mrl_fits(size_t ours, size_t asked)
{
	return !asked || asked <= ours;
}

static bool mrl_progress_ok(enum fi_progress ours, enum fi_progress asked)
{
	return asked == FI_PROGRESS_UNSPEC || asked == ours;
}

static const char *mrl_tx_miss(const struct fi_tx_attr *fi,
			       const struct fi_tx_attr *h)
{
	if (!mrl_has_all(fi->caps, h->caps))
		return "tx caps";
	if (!mrl_has_all(fi->msg_order, h->msg_order))
		return "tx msg_order";
	if (!mrl_has_all(fi->comp_order, h->comp_order))
		return "tx comp_order";
	if (!mrl_fits(fi->size, h->size) || !mrl_fits(fi->iov_limit, h->iov_limit) ||
	    !mrl_fits(fi->rma_iov_limit, h->rma_iov_limit) ||
	    !mrl_fits(fi->inject_size, h->inject_size))
		return "a tx size or limit";
	return NULL;
}

static const char *mrl_rx_miss(const struct fi_rx_attr *fi,
			       const struct fi_rx_attr *h)
{
	if (!mrl_has_all(fi->caps, h->caps))
		return "rx caps";
	if (!mrl_has_all(fi->msg_order, h->msg_order))
		return "rx msg_order";
	if (!mrl_has_all(fi->comp_order, h->comp_order))
		return "rx comp_order";
	if (!mrl_fits(fi->size, h->size) || !mrl_fits(fi->iov_limit, h->iov_limit))
		return "an rx size or limit";
	return NULL;
}

static const char *mrl_ep_miss(const struct fi_ep_attr *fi,
			       const struct fi_ep_attr *h)
{
	if (!mrl_fits(fi->max_msg_size, h->max_msg_size))
		return "max_msg_size";
	if (!mrl_fits(fi->max_order_raw_size, h->max_order_raw_size) ||
	    !mrl_fits(fi->max_order_war_size, h->max_order_war_size) ||
	    !mrl_fits(fi->max_order_waw_size, h->max_order_waw_size))
		return "a max_order size";
	if (h->protocol != FI_PROTO_UNSPEC && h->protocol != fi->protocol)
		return "protocol";
	return NULL;
}

static const char *mrl_domain_miss(const struct fi_domain_attr *fi,
				   const struct fi_domain_attr *h)
{
	uint64_t mode = h->mr_mode;

	if (!mrl_progress_ok(fi->data_progress, h->data_progress))
		return "data_progress";
	if (!mrl_progress_ok(fi->control_progress, h->control_progress))
		return "control_progress";
	if (!mrl_has_all(fi->caps, h->caps))
		return "domain caps";
	/* pre-1.5 MR modes: keys and addresses we do not choose that way */
	if (mode == MRL_MR_BASIC || mode == MRL_MR_SCALABLE ||
	    (mode & (MRL_MR_BASIC | MRL_MR_SCALABLE)))
		return "mr_mode FI_MR_BASIC or FI_MR_SCALABLE";
	if (fi->mr_mode & ~mode)
		return "mr_mode (the core needs a mode the hints lack)";
	if (!mrl_fits(fi->cq_data_size, h->cq_data_size) ||
	    !mrl_fits(fi->mr_key_size, h->mr_key_size) ||
	    !mrl_fits(fi->mr_iov_limit, h->mr_iov_limit) ||
	    !mrl_fits(fi->tx_ctx_cnt, h->tx_ctx_cnt) ||
	    !mrl_fits(fi->rx_ctx_cnt, h->rx_ctx_cnt) ||
	    !mrl_fits(fi->max_ep_tx_ctx, h->max_ep_tx_ctx) ||
	    !mrl_fits(fi->max_ep_rx_ctx, h->max_ep_rx_ctx) ||
	    !mrl_fits(fi->max_ep_stx_ctx, h->max_ep_stx_ctx) ||
	    !mrl_fits(fi->max_ep_srx_ctx, h->max_ep_srx_ctx))
		return "a domain size or limit";
	return NULL;
}

/*
 * What in the hints our entry does not give, or NULL.  Every entry must
 * honour every hint it answers (fabtests' getinfo_test checks them one by
 * one): what we cannot give we refuse, never hand back less.
 */
const char *mrl_hints_miss(const struct fi_info *fi, const struct fi_info *h)
{
	const char *miss = NULL;

	if (!h)
		return NULL;
	if (!mrl_has_all(fi->caps, h->caps))
		return "caps";
	if (h->tx_attr)
		miss = mrl_tx_miss(fi->tx_attr, h->tx_attr);
	if (!miss && h->rx_attr)
		miss = mrl_rx_miss(fi->rx_attr, h->rx_attr);
	if (!miss && h->ep_attr)
		miss = mrl_ep_miss(fi->ep_attr, h->ep_attr);
	if (!miss && h->domain_attr)
		miss = mrl_domain_miss(fi->domain_attr, h->domain_attr);
	return miss;
}

/* Exactly our core: naming "net" also lists "net;ofi_rxm". */
static struct fi_info *mrl_find_rail(struct fi_info *list,
				     const char *core_name,
				     const char *core_fabric,
				     const char *domain_name)
{
	for (; list; list = list->next) {
		if (!strcmp(list->domain_attr->name, domain_name) &&
		    !strcmp(list->fabric_attr->prov_name, core_name) &&
		    (!*core_fabric ||
		     !strcmp(list->fabric_attr->name, core_fabric)))
			return list;
	}
	return NULL;
}

/*
 * The core's entry for one rail, as fi_domain/fi_endpoint open it.  Wished
 * for, where the core has them: FI_TAGGED (our control messages apart from
 * the user's) and, on rail 0 (with source), FI_SOURCE, so that a control
 * message's claimed sender is checked against the core's word on where it
 * came from (mrl_av_claim_from), whether or not the user asked for sources.
 */
int mrl_core_getinfo_rail(uint32_t version, const char *core_name,
			  const char *core_fabric, const char *domain_name,
			  const struct fi_info *info, bool source,
			  struct fi_info **core)
{
	uint64_t wishes[] = { FI_TAGGED | (source ? FI_SOURCE : 0), FI_TAGGED,
			      source ? FI_SOURCE : 0, 0 };
	uint64_t must = info->caps & (FI_MULTI_RECV | FI_SOURCE | FI_HMEM |
				      FI_TAGGED);
	struct fi_info *hints, *list = NULL, *fi = NULL;
	size_t i;
	int ret = 0;

	hints = mrl_core_hints(info, core_name);
	if (!hints)
		return -FI_ENOMEM;
	hints->domain_attr->name = strdup(domain_name);
	hints->domain_attr->mr_mode = info->domain_attr->mr_mode & ~FI_MR_RAW;
	for (i = 0; !fi && i < sizeof(wishes) / sizeof(wishes[0]); i++) {
		if (i && wishes[i] == wishes[i - 1])
			continue;
		fi_freeinfo(list);
		list = NULL;
		hints->caps = (hints->caps & ~(FI_TAGGED | FI_SOURCE)) | must |
			      wishes[i];
		ret = fi_getinfo(version, NULL, NULL, MRL_GETINFO_HIDDEN,
				 hints, &list);
		fi = mrl_find_rail(ret ? NULL : list, core_name, core_fabric,
				   domain_name);
	}
	fi_freeinfo(hints);
	if (ret) {
		MRL_WARN(FI_LOG_DOMAIN, "rail %s: core %s getinfo: %s\n",
			 domain_name, core_name, fi_strerror(-ret));
		return ret;
	}
	if (!fi) {
		MRL_WARN(FI_LOG_DOMAIN, "rail %s: core %s has no such domain "
			 "(first found: %s %s)\n", domain_name, core_name,
			 list->fabric_attr->prov_name, list->domain_attr->name);
		fi_freeinfo(list);
		return -FI_ENODATA;
	}
	*core = fi_dupinfo(fi);
	fi_freeinfo(list);
	return *core ? 0 : -FI_ENOMEM;
}
