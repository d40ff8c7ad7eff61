/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Registration on every rail (prov/multirail/mrl_mr.c) over fake core
 * domains that record what they were asked, so that device memory is
 * tested without a GPU:
 *   - fi_mr_regattr of FI_HMEM_CUDA memory reaches every rail's core as
 *     CUDA memory of the same device, address and length, and the rails
 *     it is placed on are asked of the GPU's device, not of its address;
 *   - the "GPU buffer" lies in a PROT_NONE mapping: any host access on
 *     the way (a probe, a copy) kills the test;
 *   - fi_mr_reg is host memory on every rail; each rail's descriptor is
 *     its own core's;
 *   - a rail that refuses leaves nothing registered on the others;
 *   - a dma-buf registration (FI_MR_DMABUF) reaches every rail as it came,
 *     and no buffer is read from its attributes (libfabric 2.x builds);
 *   - with 10000 registrations a key is found as fast as with 100.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "check.h"
#include "util.h"
#include "mrl.h"

#define NRAILS	4
#define LEN	(1u << 20)

struct fi_provider mrl_prov = { .name = "multirail" };

/* What locality was asked: device memory must be placed by its device. */
static struct {
	enum fi_hmem_iface iface;
	int cuda_dev;
	const void *buf;
} placed;

uint32_t mrl_locality_mem_mask(const struct mrl_loc *locs, int n, int known,
			       enum fi_hmem_iface iface, int cuda_dev,
			       const void *buf, size_t len)
{
	(void) locs, (void) n, (void) known, (void) len;
	placed.iface = iface;
	placed.cuda_dev = cuda_dev;
	placed.buf = buf;
	return iface == FI_HMEM_CUDA ? 0x3 : 0;
}

struct fake_mr {
	struct fid_mr mr_fid;
	int rail;
};

struct fake_rail {
	struct fid_domain domain_fid;
	int rail;
	int regs, closes;
	bool refuse;
	struct fi_mr_attr last;		/* mr_iov copied into last_iov */
	struct iovec last_iov;
	uint64_t last_flags;
};

static struct fake_rail rails[NRAILS];

static int fake_mr_close(struct fid *fid)
{
	struct fake_mr *mr = (struct fake_mr *) fid;

	rails[mr->rail].closes++;
	free(mr);
	return 0;
}

static struct fi_ops fake_mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fake_mr_close,
};

static int fake_regattr(struct fid *fid, const struct fi_mr_attr *attr,
			uint64_t flags, struct fid_mr **out)
{
	struct fake_rail *rail = (struct fake_rail *) fid;
	struct fake_mr *mr;

	if (rail->refuse)
		return -FI_ENOSYS;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	rail->last = *attr;
#ifdef FI_MR_DMABUF
	if (!(flags & FI_MR_DMABUF))
#endif
		rail->last_iov = attr->mr_iov[0];
	rail->last_flags = flags;
	rail->regs++;
	mr->rail = rail->rail;
	mr->mr_fid.fid.fclass = FI_CLASS_MR;
	mr->mr_fid.fid.ops = &fake_mr_fi_ops;
	mr->mr_fid.key = 100 + rail->rail;
	mr->mr_fid.mem_desc = &rails[rail->rail];	/* recognisable */
	*out = &mr->mr_fid;
	return 0;
}

static struct fi_ops_mr fake_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.regattr = fake_regattr,
};

static void reset(struct mrl_domain *dom)
{
	int r;

	memset(rails, 0, sizeof(rails));
	for (r = 0; r < NRAILS; r++) {
		rails[r].rail = r;
		rails[r].domain_fid.fid.fclass = FI_CLASS_DOMAIN;
		rails[r].domain_fid.mr = &fake_mr_ops;
		dom->rails[r].domain = &rails[r].domain_fid;
	}
	memset(&placed, 0, sizeof(placed));
}

static void device_memory(struct mrl_domain *dom, void *gpu)
{
	struct iovec iov = { .iov_base = gpu, .iov_len = LEN };
	struct fi_mr_attr attr = {
		.mr_iov = &iov, .iov_count = 1,
		.access = FI_REMOTE_WRITE | FI_REMOTE_READ | FI_READ | FI_WRITE,
		.iface = FI_HMEM_CUDA, .device.cuda = 3,
	};
	struct fid_mr *mr = NULL;
	struct mrl_mr *m;
	int ret, r;

	reset(dom);
	ret = fi_mr_regattr(&dom->domain_fid, &attr, 0, &mr);
	check(!ret && mr, "CUDA registration: %d", ret);
	if (ret)
		return;
	m = fi_mr_desc(mr);
	for (r = 0; r < NRAILS; r++) {
		check(rails[r].regs == 1 && rails[r].last.iface == FI_HMEM_CUDA &&
		      rails[r].last.device.cuda == 3,
		      "rail %d: registered as CUDA device 3 (regs %d iface %d "
		      "device %d)", r, rails[r].regs, rails[r].last.iface,
		      rails[r].last.device.cuda);
		check(rails[r].last_iov.iov_base == gpu &&
		      rails[r].last_iov.iov_len == LEN &&
		      rails[r].last.access == attr.access,
		      "rail %d: same buffer, length and access", r);
		check(mrl_desc_rail(m, r) == &rails[r],
		      "rail %d: the descriptor is its core's", r);
	}
	check(placed.iface == FI_HMEM_CUDA && placed.cuda_dev == 3,
	      "placed by its GPU (iface %d device %d)", placed.iface,
	      placed.cuda_dev);
	check(m->near_mask == 0x3 && m->iface == FI_HMEM_CUDA,
	      "the GPU's rails kept (0x%x), device memory noted", m->near_mask);
	fi_close(&mr->fid);
	for (r = 0; r < NRAILS; r++)
		check(rails[r].closes == 1, "rail %d: closed once (%d)", r,
		      rails[r].closes);
}

static void host_memory(struct mrl_domain *dom)
{
	static char buf[4096];
	struct fid_mr *mr = NULL;
	int ret, r;

	reset(dom);
	ret = fi_mr_reg(&dom->domain_fid, buf, sizeof(buf), FI_WRITE, 0, 0, 0,
			&mr, NULL);
	check(!ret, "host registration: %d", ret);
	if (ret)
		return;
	for (r = 0; r < NRAILS; r++)
		check(rails[r].regs == 1 &&
		      rails[r].last.iface == FI_HMEM_SYSTEM,
		      "rail %d: host memory (iface %d)", r, rails[r].last.iface);
	fi_close(&mr->fid);
}

static void one_rail_refuses(struct mrl_domain *dom, void *gpu)
{
	struct iovec iov = { .iov_base = gpu, .iov_len = LEN };
	struct fi_mr_attr attr = {
		.mr_iov = &iov, .iov_count = 1, .access = FI_WRITE,
		.iface = FI_HMEM_CUDA, .device.cuda = 0,
	};
	struct fid_mr *mr = NULL;
	int ret, r;

	reset(dom);
	rails[2].refuse = true;
	ret = fi_mr_regattr(&dom->domain_fid, &attr, 0, &mr);
	check(ret == -FI_ENOSYS, "rail 2 refuses: the core's error (%d)", ret);
	for (r = 0; r < 2; r++)
		check(rails[r].regs == rails[r].closes,
		      "rail %d: nothing left registered (%d/%d)", r,
		      rails[r].regs, rails[r].closes);
}

#ifdef FI_MR_DMABUF
/*
 * A dma-buf registration (libfabric 1.20 on, as aws-ofi-nccl makes for
 * GPU memory): attr->dmabuf shares mr_iov's place, so read as an iov its
 * file descriptor would be an address.  Every rail gets the same
 * attributes and flag; locality asks the device, never a buffer.
 */
static void dmabuf_memory(struct mrl_domain *dom, void *gpu)
{
	struct fi_mr_dmabuf dmabuf = {
		.fd = 7, .offset = 4096, .len = LEN, .base_addr = gpu,
	};
	struct fi_mr_attr attr = {
		.dmabuf = &dmabuf, .iov_count = 1, .access = FI_REMOTE_WRITE,
		.iface = FI_HMEM_CUDA, .device.cuda = 2,
	};
	struct fid_mr *mr = NULL;
	int ret, r;

	reset(dom);
	ret = fi_mr_regattr(&dom->domain_fid, &attr, FI_MR_DMABUF, &mr);
	check(!ret && mr, "dma-buf registration: %d", ret);
	if (ret)
		return;
	for (r = 0; r < NRAILS; r++)
		check(rails[r].regs == 1 &&
		      (rails[r].last_flags & FI_MR_DMABUF) &&
		      rails[r].last.dmabuf == &dmabuf &&
		      rails[r].last.iface == FI_HMEM_CUDA &&
		      rails[r].last.device.cuda == 2,
		      "rail %d: the same dma-buf, flag and device", r);
	check(placed.iface == FI_HMEM_CUDA && placed.cuda_dev == 2 &&
	      !placed.buf, "placed by its GPU, no buffer read (%p)",
	      placed.buf);
	fi_close(&mr->fid);

	/* host memory behind a dma-buf: placed by no buffer either */
	reset(dom);
	attr.iface = FI_HMEM_SYSTEM;
	ret = fi_mr_regattr(&dom->domain_fid, &attr, FI_MR_DMABUF, &mr);
	check(!ret && placed.iface == FI_HMEM_SYSTEM && !placed.buf,
	      "host dma-buf: registered (%d), no buffer read (%p)", ret,
	      placed.buf);
	if (!ret)
		fi_close(&mr->fid);

	reset(dom);
	attr.dmabuf = NULL;
	ret = fi_mr_regattr(&dom->domain_fid, &attr, FI_MR_DMABUF, &mr);
	check(ret == -FI_EINVAL && !rails[0].regs,
	      "FI_MR_DMABUF without a dma-buf: -FI_EINVAL (%d), no rail "
	      "asked", ret);
}
#endif

/* CPU ns per mrl_mr_find over the first n keys, each found as itself. */
static double find_ns(struct mrl_domain *dom, struct fid_mr **mrs, int n)
{
	double t0 = cpu_now();
	int round, i, bad = 0;

	for (round = 0; round < 20; round++)
		for (i = 0; i < n; i++)
			bad += mrl_mr_find(dom, fi_mr_key(mrs[i])) !=
			       fi_mr_desc(mrs[i]);
	check(!bad, "%d keys of %d found as their registration", n - bad / 20,
	      n);
	return (cpu_now() - t0) * 1e9 / (20.0 * n);
}

/*
 * A target answers key requests by looking the key up (anyone who reaches
 * rail 0 can ask): with 10000 registrations, as fast as with 100.
 */
static void many_keys(struct mrl_domain *dom)
{
	enum { FEW = 100, MANY = 10000 };
	static char buf[4096];
	struct fid_mr **mrs = calloc(MANY, sizeof(*mrs));
	double few = 0, many;
	int i, ret = 0;

	reset(dom);
	for (i = 0; i < MANY && !ret && mrs; i++) {
		ret = fi_mr_reg(&dom->domain_fid, buf, sizeof(buf),
				FI_REMOTE_WRITE, 0, 0, 0, &mrs[i], NULL);
		if (i + 1 == FEW)
			few = find_ns(dom, mrs, FEW);
	}
	check(mrs && !ret, "%d registrations: %d", MANY, ret);
	if (!mrs || ret)
		return;
	/*
	 * 100 keys stay in the first-level cache and 10000 do not, and a
	 * debug build (-O0) doubles the cost of each: a walk over the
	 * registrations would take microseconds at 10000 (a hundred times
	 * the 100's), so the bound leaves room for the caches alone.
	 */
	many = find_ns(dom, mrs, MANY);
	check(many <= 4 * few || many < 1000,
	      "a key found in %.0f ns among %d registrations, %.0f among %d",
	      many, MANY, few, FEW);
	for (i = 0; i < MANY; i++)
		fi_close(&mrs[i]->fid);
	free(mrs);
}

int main(void)
{
	static struct fi_ops_mr mr_ops = {
		.size = sizeof(struct fi_ops_mr),
		.reg = mrl_mr_reg,
		.regv = mrl_mr_regv,
		.regattr = mrl_mr_regattr,
	};
	struct mrl_domain *dom = calloc(1, sizeof(*dom));
	void *gpu;

	setvbuf(stdout, NULL, _IONBF, 0);
	gpu = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!dom || gpu == MAP_FAILED)
		return 2;
	dom->nrails = NRAILS;
	dom->domain_fid.fid.fclass = FI_CLASS_DOMAIN;
	dom->domain_fid.mr = &mr_ops;
	dom->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY |
		       FI_MR_HMEM;
	mrl_list_init(&dom->mrs);
	device_memory(dom, gpu);
	host_memory(dom);
	one_rail_refuses(dom, gpu);
	many_keys(dom);
#ifdef FI_MR_DMABUF
	dmabuf_memory(dom, gpu);
#else
	printf("ok: dma-buf not in this libfabric's headers: not tested\n");
#endif
	munmap(gpu, LEN);
	free(dom);
	printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
	       check_failures);
	return check_failures ? 1 : 0;
}
