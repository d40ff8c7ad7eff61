/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The counter (prov/multirail/mrl_cntr.c) over a fake core counter that
 * already holds errors, as a rail's remote-event counter does once a peer's
 * write failed there (tcp never counts one, so this is a unit test):
 *   - fi_cntr_readerr is the cores' errors plus ours, less what
 *     fi_cntr_seterr took away: seterr(0) clears the cores' errors too;
 *   - fi_cntr_wait returns -FI_EAVAIL only for an error that came during
 *     the wait, as libfabric's util counter does: errors from before it
 *     leave it to wait its timeout (-FI_ETIMEDOUT) or its threshold (0).
 * No endpoint is bound, so the counter's progress does nothing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "mrl.h"
#include "util.h"

struct fi_provider mrl_prov = { .name = "multirail" };

void mrl_ep_progress(struct mrl_ep *ep)
{
	(void) ep;
}

/* A core counter: value and errors set by the test; an error may arrive
 * after some reads, as if during a wait. */
struct fake_cntr {
	struct fid_cntr cntr_fid;
	uint64_t value, err;
	int err_after;		/* readerr calls before err grows; 0: never */
};

static struct fake_cntr fake;

static uint64_t fake_read(struct fid_cntr *c)
{
	return fake.value;
}

static uint64_t fake_readerr(struct fid_cntr *c)
{
	if (fake.err_after && !--fake.err_after)
		fake.err++;
	return fake.err;
}

static struct fi_ops_cntr fake_cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = fake_read,
	.readerr = fake_readerr,
};

static int fake_cntr_open(struct fid_domain *d, struct fi_cntr_attr *attr,
			  struct fid_cntr **out, void *context)
{
	fake.cntr_fid.fid.fclass = FI_CLASS_CNTR;
	fake.cntr_fid.ops = &fake_cntr_ops;
	*out = &fake.cntr_fid;
	return 0;
}

static struct fi_ops_domain fake_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.cntr_open = fake_cntr_open,
};

static struct fid_domain fake_domain = { .ops = &fake_domain_ops };

/* fi_cntr_wait's verdict and how long it took, in seconds. */
static int timed_wait(struct fid_cntr *c, uint64_t threshold, int ms,
		      double *dt)
{
	double t0 = now();
	int ret = fi_cntr_wait(c, threshold, ms);

	*dt = now() - t0;
	return ret;
}

int main(void)
{
	struct mrl_domain dom = { .locking = false };
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP };
	struct fid_cntr *c, *core;
	double dt;
	int ret;

	setvbuf(stdout, NULL, _IONBF, 0);
	CHK(mrl_cntr_open(&dom.domain_fid, &attr, &c, NULL));
	CHK(mrl_cntr_open_core(mrl_container_of(c, struct mrl_cntr, cntr_fid),
			       0, &fake_domain, &core));
	fake.value = 10;
	fake.err = 3;
	check(fi_cntr_read(c) == 10, "read: the core's 10");
	check(fi_cntr_readerr(c) == 3, "readerr: the core's 3 errors (got "
	      "%lu)", (unsigned long) fi_cntr_readerr(c));

	ret = timed_wait(c, 11, 200, &dt);
	check(ret == -FI_ETIMEDOUT && dt > 0.15 && dt < 2,
	      "wait for 11 with 3 old errors: -FI_ETIMEDOUT after 200 ms "
	      "(got %d %s after %.3f s)", ret, fi_strerror(-ret), dt);

	CHK(fi_cntr_seterr(c, 0));
	check(fi_cntr_readerr(c) == 0, "seterr(0) clears the core's errors "
	      "(readerr %lu)", (unsigned long) fi_cntr_readerr(c));
	CHK(fi_cntr_seterr(c, 5));
	check(fi_cntr_readerr(c) == 5, "seterr(5): readerr 5 (got %lu)",
	      (unsigned long) fi_cntr_readerr(c));
	CHK(fi_cntr_seterr(c, 0));
	mrl_cntr_inc_err(mrl_container_of(c, struct mrl_cntr, cntr_fid));
	check(fi_cntr_readerr(c) == 1, "then one error of ours: readerr 1 "
	      "(got %lu)", (unsigned long) fi_cntr_readerr(c));

	fake.err_after = 5;
	ret = timed_wait(c, 11, 5000, &dt);
	check(ret == -FI_EAVAIL && dt < 2, "an error during the wait: "
	      "-FI_EAVAIL at once (got %d %s after %.3f s)", ret,
	      fi_strerror(-ret), dt);
	check(fi_cntr_readerr(c) == 2, "readerr counts it: 2 (got %lu)",
	      (unsigned long) fi_cntr_readerr(c));

	fake.value = 11;
	ret = timed_wait(c, 11, 5000, &dt);
	check(ret == 0 && dt < 2, "wait for 11 reached, errors before it: 0 "
	      "(got %d %s)", ret, fi_strerror(-ret));
	CHK(fi_cntr_set(c, 0));
	CHK(fi_cntr_add(c, 2));
	check(fi_cntr_read(c) == 2, "set(0), add(2): read 2 (got %lu)",
	      (unsigned long) fi_cntr_read(c));

	CHK(fi_close(&c->fid));
	printf("%s\n", check_failures ? "FAIL" : "PASS");
	return check_failures ? 1 : 0;
}
