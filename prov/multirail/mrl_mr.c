/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Memory registration on every rail.
 *
 * Keys.  Every rail's core gives its own key, and on EFA each is 32 bits,
 * so 32 rails cannot be packed into the 64-bit key of fi_mr_key().  Our key
 * names the registration instead: it is rail 0's core key (with 32-bit core
 * keys, a per-domain generation sits in the high half so a key is never
 * reused for a later registration).  An initiator can use it on rail 0 at
 * once, and it learns the other rails' keys from the target over the
 * control channel (KEY_REQ/KEY_RESP), once per peer and key; until then the
 * operation goes on rail 0 only.  Applications that accept FI_MR_RAW get a
 * raw key holding every rail's key instead, and fi_mr_map_raw() makes it
 * usable on all rails at once.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

static struct mrl_mr *mrl_to_mr(struct fid *fid)
{
	return mrl_container_of(fid, struct mrl_mr, mr_fid.fid);
}

static void mrl_close_core(struct mrl_mr *mr)
{
	int i;

	for (i = 0; i < mr->domain->nrails; i++) {
		if (mr->core[i])
			fi_close(&mr->core[i]->fid);
		mr->core[i] = NULL;
	}
}

static void mrl_mr_unhash(struct mrl_mr *mr);

static int mrl_mr_close(struct fid *fid)
{
	struct mrl_mr *mr = mrl_to_mr(fid);
	struct mrl_domain *dom = mr->domain;

	mrl_lock(dom);
	mrl_list_del(&mr->link);
	mrl_mr_unhash(mr);
	mrl_unlock(dom);
	mrl_close_core(mr);
	free(mr);
	return 0;
}

/*
 * Registrations by our key, so that a peer's key question (anyone who
 * reaches rail 0 may ask) costs one bucket, not a walk of every
 * registration.  Domain locked.
 */
static size_t mrl_mr_bucket(const struct mrl_domain *dom, uint64_t key)
{
	return (size_t) mrl_mix64(key) & (dom->mr_nhash - 1);
}

static void mrl_mr_unhash(struct mrl_mr *mr)
{
	struct mrl_domain *dom = mr->domain;
	struct mrl_mr **p;

	if (!mr->hashed)
		return;
	p = &dom->mr_hash[mrl_mr_bucket(dom, mr->mr_fid.key)];
	while (*p && *p != mr)
		p = &(*p)->hnext;
	if (*p)
		*p = mr->hnext;
	mr->hashed = false;
	dom->mr_nhashed--;
}

/* Room for one more at no more than 2 a bucket on average. */
static int mrl_mr_hash_reserve(struct mrl_domain *dom)
{
	struct mrl_mr **old = dom->mr_hash, *mr, *next;
	size_t nold = dom->mr_nhash, n = nold ? nold : 64, i, b;

	if (dom->mr_nhashed + 1 <= 2 * nold)
		return 0;
	while (dom->mr_nhashed + 1 > 2 * n)
		n *= 2;
	dom->mr_hash = calloc(n, sizeof(*dom->mr_hash));
	if (!dom->mr_hash) {
		dom->mr_hash = old;
		return -FI_ENOMEM;
	}
	dom->mr_nhash = n;
	for (i = 0; i < nold; i++) {
		for (mr = old[i]; mr; mr = next) {
			next = mr->hnext;
			b = mrl_mr_bucket(dom, mr->mr_fid.key);
			mr->hnext = dom->mr_hash[b];
			dom->mr_hash[b] = mr;
		}
	}
	free(old);
	return 0;
}

static int mrl_mr_hash(struct mrl_mr *mr)
{
	struct mrl_domain *dom = mr->domain;
	size_t b;
	int ret = mrl_mr_hash_reserve(dom);

	if (ret)
		return ret;
	b = mrl_mr_bucket(dom, mr->mr_fid.key);
	mr->hnext = dom->mr_hash[b];
	dom->mr_hash[b] = mr;
	mr->hashed = true;
	dom->mr_nhashed++;
	return 0;
}

static int mrl_set_key(struct mrl_mr *mr)
{
	struct mrl_domain *dom = mr->domain;
	int i;

	mrl_mr_unhash(mr);
	mr->key0 = fi_mr_key(mr->core[0]);
	mr->mr_fid.key = mr->key0;
	/* 32-bit core keys: ours carry a generation above them */
	if (dom->key0_mask != ~0ull && (dom->mr_mode & FI_MR_PROV_KEY))
		mr->mr_fid.key = mrl_key_with_gen(++dom->key_gen, mr->key0);
	for (i = 0; i < dom->nrails; i++)
		mr->core_desc[i] = fi_mr_desc(mr->core[i]);
	return mrl_mr_hash(mr);
}

static int mrl_raw_attr(struct mrl_mr *mr, struct fi_mr_raw_attr *attr)
{
	struct mrl_domain *dom = mr->domain;
	size_t need = sizeof(struct mrl_raw_key) +
		      dom->nrails * sizeof(uint64_t);
	struct mrl_raw_key *raw;
	int i;

	if (!(dom->mr_mode & FI_MR_RAW))
		return -FI_ENOSYS;
	if (attr->base_addr)
		*attr->base_addr = 0;
	if (*attr->key_size < need) {
		*attr->key_size = need;
		return -FI_ETOOSMALL;
	}
	raw = (struct mrl_raw_key *) attr->raw_key;
	raw->magic = MRL_RAW_MAGIC;
	raw->nrails = dom->nrails;
	raw->reserved = 0;
	for (i = 0; i < dom->nrails; i++)
		raw->keys[i] = fi_mr_key(mr->core[i]);
	*attr->key_size = need;
	return 0;
}

static int mrl_mr_control(struct fid *fid, int command, void *arg)
{
	struct mrl_mr *mr = mrl_to_mr(fid);
	int i, ret;

	switch (command) {
	case FI_ENABLE:
		for (i = 0; i < mr->domain->nrails; i++) {
			ret = fi_mr_enable(mr->core[i]);
			if (ret)
				return ret;
		}
		mrl_lock(mr->domain);
		ret = mrl_set_key(mr);
		mrl_unlock(mr->domain);
		return ret;
	case FI_GET_RAW_MR:
		return mrl_raw_attr(mr, arg);
	default:
		return -FI_ENOSYS;
	}
}

static int mrl_mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct mrl_mr *mr = mrl_to_mr(fid);
	struct mrl_ep *ep;
	int i, ret;

	if (bfid->fclass != FI_CLASS_EP) {
		MRL_WARN(FI_LOG_MR, "MR bind to class %zu not supported\n",
			 bfid->fclass);
		return -FI_EINVAL;
	}
	ep = mrl_container_of(bfid, struct mrl_ep, ep_fid.fid);
	for (i = 0; i < mr->domain->nrails; i++) {
		ret = fi_mr_bind(mr->core[i], &ep->rails[i].ep->fid, flags);
		if (ret)
			return ret;
	}
	return 0;
}

static struct fi_ops mrl_mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_mr_close,
	.bind = mrl_mr_bind,
	.control = mrl_mr_control,
	.ops_open = mrl_no_ops_open,
};

/*
 * The registration's buffer as locality reads it: its one iov, or none for
 * a dma-buf (FI_MR_DMABUF, libfabric 1.20 on: attr->dmabuf takes mr_iov's
 * place and is never read as an iov; its memory is placed by its device,
 * or not at all).  The cores get the attributes and flags as they came.
 */
static int mrl_reg_buffer(const struct fi_mr_attr *attr, uint64_t flags,
			  const void **buf, size_t *len)
{
#ifdef FI_MR_DMABUF
	if (flags & FI_MR_DMABUF) {
		if (attr->iov_count != 1 || !attr->dmabuf) {
			MRL_WARN(FI_LOG_MR, "FI_MR_DMABUF registration needs "
				 "exactly one dma-buf (got %zu%s)\n",
				 attr->iov_count,
				 attr->dmabuf ? "" : ", none given");
			return -FI_EINVAL;
		}
		*buf = NULL;
		*len = attr->dmabuf->len;
		return 0;
	}
#else
	(void) flags;
#endif
	if (!attr->iov_count || attr->iov_count > 1 || !attr->mr_iov) {
		MRL_WARN(FI_LOG_MR, "registration needs exactly one iov "
			 "(got %zu)\n", attr->iov_count);
		return -FI_EINVAL;
	}
	*buf = attr->mr_iov[0].iov_base;
	*len = attr->mr_iov[0].iov_len;
	return 0;
}

int mrl_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		   uint64_t flags, struct fid_mr **mr_out)
{
	struct mrl_domain *dom = mrl_container_of(fid, struct mrl_domain,
						  domain_fid.fid);
	struct fi_mr_attr core_attr;
	struct mrl_mr *mr;
	const void *buf;
	size_t len;
	int i, ret;

	if (!attr) {
		MRL_WARN(FI_LOG_MR, "fi_mr_regattr without attributes\n");
		return -FI_EINVAL;
	}
	ret = mrl_reg_buffer(attr, flags, &buf, &len);
	if (ret)
		return ret;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	mr->domain = dom;
	mr->iface = attr->iface;
	mr->access = attr->access;
	mr->near_mask = mrl_locality_mem_mask(dom->rail_loc, dom->nrails,
					      dom->rails_located, attr->iface,
					      attr->iface == FI_HMEM_CUDA ?
					      attr->device.cuda : -1,
					      buf, len);
	mrl_list_init(&mr->link);

	for (i = 0; i < dom->nrails; i++) {
		core_attr = *attr;
		core_attr.context = NULL;
		ret = fi_mr_regattr(dom->rails[i].domain, &core_attr, flags,
				    &mr->core[i]);
		if (ret) {
			MRL_WARN(FI_LOG_MR, "rail %d: registration failed: %s\n",
				 i, fi_strerror(-ret));
			mrl_close_core(mr);
			free(mr);
			return ret;
		}
	}
	mr->mr_fid.fid.fclass = FI_CLASS_MR;
	mr->mr_fid.fid.context = attr->context;
	mr->mr_fid.fid.ops = &mrl_mr_fi_ops;
	mr->mr_fid.mem_desc = mr;
	mrl_lock(dom);
	ret = dom->mr_mode & FI_MR_ENDPOINT ? 0 : mrl_set_key(mr);
	if (!ret)
		mrl_list_add_tail(&dom->mrs, &mr->link);
	mrl_unlock(dom);
	if (ret) {
		mrl_close_core(mr);
		free(mr);
		return ret;
	}
	*mr_out = &mr->mr_fid;
	return 0;
}

int mrl_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		uint64_t access, uint64_t offset, uint64_t requested_key,
		uint64_t flags, struct fid_mr **mr, void *context)
{
	struct fi_mr_attr attr = {
		.mr_iov = iov,
		.iov_count = count,
		.access = access,
		.offset = offset,
		.requested_key = requested_key,
		.context = context,
		.iface = FI_HMEM_SYSTEM,
	};

	return mrl_mr_regattr(fid, &attr, flags, mr);
}

int mrl_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
	       uint64_t offset, uint64_t requested_key, uint64_t flags,
	       struct fid_mr **mr, void *context)
{
	struct iovec iov = { .iov_base = (void *) buf, .iov_len = len };

	return mrl_mr_regv(fid, &iov, 1, access, offset, requested_key, flags,
			   mr, context);
}

/* Target side: the registration behind one of our keys.  Domain locked. */
struct mrl_mr *mrl_mr_find(struct mrl_domain *dom, uint64_t key)
{
	mrl_assert_locked(dom);
	struct mrl_mr *mr;

	if (!dom->mr_nhash)
		return NULL;
	for (mr = dom->mr_hash[mrl_mr_bucket(dom, key)]; mr; mr = mr->hnext)
		if (mr->mr_fid.key == key && mr->core[0])
			return mr;
	return NULL;
}

void *mrl_desc_rail(void *desc, int rail)
{
	return desc ? ((struct mrl_mr *) desc)->core_desc[rail] : NULL;
}

int mrl_mr_map_raw(struct fid_domain *domain, uint64_t base_addr,
		   uint8_t *raw_key, size_t key_size, uint64_t *key,
		   uint64_t flags)
{
	struct mrl_domain *dom = mrl_container_of(domain, struct mrl_domain,
						  domain_fid);
	const struct mrl_raw_key *raw = (const void *) raw_key;
	struct mrl_raw_map *maps;
	size_t i;
	int r;

	if (!raw || key_size < sizeof(*raw) || raw->magic != MRL_RAW_MAGIC ||
	    !raw->nrails || raw->nrails > MRL_MAX_RAILS ||
	    key_size < sizeof(*raw) + raw->nrails * sizeof(uint64_t)) {
		MRL_WARN(FI_LOG_MR, "fi_mr_map_raw: not a multirail raw key "
			 "(%zu bytes)\n", key_size);
		return -FI_EINVAL;
	}
	mrl_lock(dom);
	for (i = 0; i < dom->nraw_maps && dom->raw_maps[i].used; i++)
		;
	if (i == dom->nraw_maps) {
		maps = realloc(dom->raw_maps, (i * 2 + 8) * sizeof(*maps));
		if (!maps) {
			mrl_unlock(dom);
			return -FI_ENOMEM;
		}
		memset(maps + i, 0, (i + 8) * sizeof(*maps));
		dom->raw_maps = maps;
		dom->nraw_maps = i * 2 + 8;
	}
	dom->raw_maps[i].used = true;
	dom->raw_maps[i].nrails = raw->nrails;
	for (r = 0; r < raw->nrails; r++)
		dom->raw_maps[i].keys[r] = raw->keys[r];
	mrl_unlock(dom);
	*key = MRL_RAW_KEY_TAG | i;
	return 0;
}

int mrl_mr_unmap_key(struct fid_domain *domain, uint64_t key)
{
	struct mrl_domain *dom = mrl_container_of(domain, struct mrl_domain,
						  domain_fid);
	size_t i = key & ~MRL_RAW_KEY_TAG;
	bool mapped;

	mrl_lock(dom);
	mapped = (key & MRL_RAW_KEY_TAG) && i < dom->nraw_maps &&
		 dom->raw_maps[i].used;
	if (mapped)
		dom->raw_maps[i].used = false;
	mrl_unlock(dom);
	if (!mapped) {
		MRL_WARN(FI_LOG_MR, "fi_mr_unmap_key: key 0x%lx was not "
			 "mapped\n", (unsigned long) key);
		return -FI_EINVAL;
	}
	return 0;
}

/* Domain locked. */
const struct mrl_raw_map *mrl_raw_lookup(struct mrl_domain *dom, uint64_t key)
{
	mrl_assert_locked(dom);
	size_t i = key & ~MRL_RAW_KEY_TAG;

	if (!(key & MRL_RAW_KEY_TAG) || i >= dom->nraw_maps ||
	    !dom->raw_maps[i].used)
		return NULL;
	return &dom->raw_maps[i];
}
