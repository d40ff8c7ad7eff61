/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The fabric object: the core and core fabric its name (multirail/<core>
 * [/<core fabric>]) selects, and nothing of the cores themselves (each
 * domain opens its rails' fabrics); it opens our domains and EQs.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

static int mrl_fabric_close(struct fid *fid)
{
	free(mrl_container_of(fid, struct mrl_fabric, fabric_fid.fid));
	return 0;
}

static struct fi_ops mrl_fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_fabric_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_fabric mrl_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = mrl_domain_open,
	.passive_ep = mrl_no_passive_ep,
	.eq_open = mrl_eq_open,
	.wait_open = mrl_no_wait_open,
	.trywait = mrl_no_trywait,
};

int mrl_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		    void *context)
{
	struct mrl_fabric *fab;

	fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -FI_ENOMEM;
	if (!attr->name ||
	    mrl_parse_fabric_name(attr->name, fab->core_name,
				  sizeof(fab->core_name), fab->core_fabric,
				  sizeof(fab->core_fabric))) {
		MRL_WARN(FI_LOG_FABRIC, "fabric name '%s' is not one of ours "
			 "(%s<core>[/<core fabric>])\n", attr->name ? attr->name : "(null)",
			 MRL_FABRIC_PREFIX);
		free(fab);
		return -FI_EINVAL;
	}
	fab->version = attr->api_version ? attr->api_version :
		       FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
	fab->fabric_fid.fid.fclass = FI_CLASS_FABRIC;
	fab->fabric_fid.fid.context = context;
	fab->fabric_fid.fid.ops = &mrl_fabric_fi_ops;
	fab->fabric_fid.ops = &mrl_fabric_ops;
	*fabric = &fab->fabric_fid;
	return 0;
}
