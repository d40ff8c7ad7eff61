/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Endpoint options over several rails (mrl_ep_opt.c), on the test
 * provider's efa (test/efa.sh: FI_PROVIDER="multirail;efa", 4 NICs):
 * - an option about how the cores move data reaches every rail: read back
 *   through multirail (a permission any rail has, a promise every rail
 *   keeps) it is what was set;
 * - efa's 128-byte write ordering is refused over several rails;
 * - efa's RNR retries before fi_enable, refused after;
 * - message size limits as low as 64 bytes leave the control channel
 *   working: a striped write to ourselves carries bytes on every rail,
 *   which takes every rail's keys, learned in control messages;
 * - with -r (FI_EFA_EMU_OPT_REFUSE names rail 2's NIC): a rail that
 *   refuses fails the call, and the rails before it get their former value
 *   back.
 * Every transfer's bytes are checked.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_rma.h>

#include "side.h"
#include "util.h"

#include "rdma/fi_ext_multirail.h"

/* option names by value: 1.17's headers lack them (mrl_ep_opt.c) */
#define OPT_SHM_PERMITTED	11
#define OPT_MAX_MSG_SIZE	12
#define OPT_MAX_TAGGED_SIZE	13
#define OPT_CUDA_API_PERMITTED	10
#define OPT_EFA(n)		(-FI_PROV_SPECIFIC_EFA + (n))
#define OPT_RNR_RETRY		OPT_EFA(0)
#define OPT_EMULATED_WRITE	OPT_EFA(2)
#define OPT_USE_DEVICE_RDMA	OPT_EFA(4)
#define OPT_WRITE_IN_ORDER	OPT_EFA(6)

#define LEN		(4 << 20)	/* striped over every rail */
#define TIMEOUT_S	20

static struct side s;
static struct fi_multirail_ep_ops *ops;

static int set_bool(int name, bool v)
{
	return fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, name, &v, sizeof(v));
}

static bool get_bool(int name)
{
	bool v;
	size_t len = sizeof(v);

	CHK(fi_getopt(&s.ep->fid, FI_OPT_ENDPOINT, name, &v, &len));
	if (len != sizeof(v))
		die("option %d: length %zu", name, len);
	return v;
}

static int set_size(int name, size_t v)
{
	return fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, name, &v, sizeof(v));
}

static void expect(int got, int want, const char *what)
{
	if (got != want)
		die("%s: %d (%s), expected %d", what, got, fi_strerror(-got),
		    want);
}

static void every_rail_takes_options(void)
{
	size_t rnr, len = sizeof(rnr);
	int cuda;

	expect(set_bool(OPT_SHM_PERMITTED, false), 0, "shm off");
	if (get_bool(OPT_SHM_PERMITTED))
		die("shared memory still permitted on some rail");
	expect(set_bool(OPT_USE_DEVICE_RDMA, false), 0, "device RDMA off");
	if (get_bool(OPT_USE_DEVICE_RDMA))
		die("device RDMA off, read back on");
	expect(set_bool(OPT_USE_DEVICE_RDMA, true), 0, "device RDMA on");
	if (!get_bool(OPT_USE_DEVICE_RDMA))
		die("device RDMA on, read back off on some rail");
	if (get_bool(OPT_EMULATED_WRITE))
		die("emulated write on some rail");
	expect(set_size(OPT_RNR_RETRY, 3), 0, "RNR retries before enable");
	CHK(fi_getopt(&s.ep->fid, FI_OPT_ENDPOINT, OPT_RNR_RETRY, &rnr, &len));
	if (rnr != 3)
		die("RNR retries read back %zu", rnr);
	/* efa without CUDA refuses it (-FI_EINVAL); with CUDA, all rails */
	cuda = set_bool(OPT_CUDA_API_PERMITTED, false);
	if (cuda && cuda != -FI_EINVAL)
		die("CUDA API off: %d", cuda);
	if (!cuda && get_bool(OPT_CUDA_API_PERMITTED))
		die("CUDA API off, still permitted on some rail");
	printf("ok options on every rail: shm off, device RDMA off and on, "
	       "RNR retries 3, CUDA API off: %s\n",
	       cuda ? "refused (no CUDA), as efa" : "set");
}

static void striping_breaks_write_order(void)
{
	expect(set_bool(OPT_WRITE_IN_ORDER, true), -FI_EOPNOTSUPP,
	       "128-byte write order over several rails");
	expect(set_bool(OPT_WRITE_IN_ORDER, false), 0, "write order off");
	if (get_bool(OPT_WRITE_IN_ORDER))
		die("write order read back on");
	printf("ok 128-byte write order refused over %d rails\n",
	       ops->rail_count(s.ep));
}

/* A refusing rail 2: the call fails, rails 0 and 1 get their value back. */
static void a_refusing_rail_changes_nothing(void)
{
	expect(set_bool(OPT_SHM_PERMITTED, false), -FI_EOPNOTSUPP,
	       "shm off, rail 2 refusing");
	if (!get_bool(OPT_SHM_PERMITTED))
		die("shm read back off");
	expect(set_bool(OPT_USE_DEVICE_RDMA, false), -FI_EOPNOTSUPP,
	       "device RDMA off, rail 2 refusing");
	if (!get_bool(OPT_USE_DEVICE_RDMA))
		die("device RDMA left off on the rails before the refusal");
	printf("ok a rail's refusal fails the call; the rails before it set "
	       "back\n");
}

static void wait_write(void)
{
	struct fi_cq_tagged_entry e;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while ((r = fi_cq_read(s.cq, &e, 1)) == -FI_EAGAIN && now() < end)
		;
	if (r == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(s.cq, &err, 0);
		die("write failed: %s", fi_strerror(err.err));
	}
	if (r != 1)
		die("no write completion: %zd", r);
}

static void write_self(fi_addr_t self, struct fid_mr *mr, uint8_t *src,
		       uint64_t raddr)
{
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while ((r = fi_write(s.ep, src, LEN, fi_mr_desc(mr), self, raddr,
			     fi_mr_key(mr), NULL)) == -FI_EAGAIN &&
	       now() < end)
		fi_cq_read(s.cq, NULL, 0);
	CHK(r);
	wait_write();
}

/*
 * Rail 0's first write goes before the other rails' keys are known; the
 * rest stripe once they are.  Every rail must carry bytes.
 */
static void small_message_limits_spare_control(void)
{
	uint8_t *buf = aligned_alloc(4096, 2 * LEN), *dst = buf + LEN;
	uint8_t name[1024];
	size_t namelen = sizeof(name), i;
	int r, nrails = ops->rail_count(s.ep);
	uint64_t raddr;
	fi_addr_t self;
	struct fid_mr *mr;

	if (!buf)
		die("no memory");
	for (i = 0; i < LEN; i++) {
		buf[i] = (uint8_t) rand();
		dst[i] = 0xA5;
	}
	CHK(fi_mr_reg(s.domain, buf, 2 * LEN, FI_WRITE | FI_REMOTE_WRITE, 0,
		      0, 0, &mr, NULL));
	if (s.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		CHK(fi_mr_bind(mr, &s.ep->fid, 0));
		CHK(fi_mr_enable(mr));
	}
	raddr = (s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
		(uintptr_t) dst : LEN;
	CHK(fi_getname(&s.ep->fid, name, &namelen));
	if (fi_av_insert(s.av, name, 1, &self, 0, NULL) != 1)
		die("fi_av_insert of ourselves");
	for (i = 0; i < 16; i++)
		write_self(self, mr, buf, raddr);
	for (double end = now() + TIMEOUT_S; memcmp(buf, dst, LEN) &&
	     now() < end;)
		fi_cq_read(s.cq, NULL, 0);
	if (memcmp(buf, dst, LEN))
		die("bytes wrong after the writes");
	for (r = 0; r < nrails; r++) {
		struct fi_multirail_rail_stats st;

		CHK(ops->rail_stats(s.ep, r, &st));
		if (!st.tx_bytes)
			die("rail %d carried nothing under 64-byte message "
			    "limits: its keys never came", r);
	}
	printf("ok message limits of 64 bytes: writes striped over %d rails, "
	       "every byte in place\n", nrails);
	CHK(fi_close(&mr->fid));
	free(buf);
}

int main(int argc, char **argv)
{
	bool refusing = argc > 1 && !strcmp(argv[1], "-r");

	setvbuf(stdout, NULL, _IONBF, 0);
	srand(7);
	open_side_unenabled(&s, "multirail", NULL, NULL,
			    FI_MSG | FI_TAGGED | FI_RMA);
	CHK(fi_open_ops(&s.ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops,
			NULL));
	if (ops->rail_count(s.ep) < 4)
		die("needs 4 rails");
	if (refusing) {
		a_refusing_rail_changes_nothing();
		close_side(&s);
		return 0;
	}
	every_rail_takes_options();
	striping_breaks_write_order();
	expect(set_size(OPT_MAX_MSG_SIZE, 64), 0, "messages of 64 bytes");
	expect(set_size(OPT_MAX_TAGGED_SIZE, 64), 0, "tagged of 64 bytes");
	CHK(fi_enable(s.ep));
	expect(set_size(OPT_RNR_RETRY, 5), -FI_EINVAL,
	       "RNR retries after enable");
	small_message_limits_spare_control();
	close_side(&s);
	return 0;
}
