/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The fid_nic of an emulated EFA device.  efa fills one per device from
 * sysfs (efa_prov_info.c): its name, its PCI address and its link.
 * aws-ofi-nccl places each NIC in the host's topology by that PCI address
 * and reads the name and the link speed, so an entry without one stops its
 * RDMA protocol.  The emulated device rdmap<bus>s<slot> sits at PCI address
 * 0000:<bus>:<slot>.0 (FI_EFA_EMU_NICS), so that on a host whose hwloc
 * topology has a device there the client can place it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "efa_emu.h"

#define EMU_NIC_SPEED	100000000000ull	/* 100 Gbit/s, in bit/s */

struct emu_fid_nic {
	struct fid_nic nic;
	unsigned int bus, slot;
	struct fi_device_attr dev;
	struct fi_bus_attr bus_attr;
	struct fi_link_attr link;
};

static int emu_nic_close(struct fid *fid)
{
	struct emu_fid_nic *n = (struct emu_fid_nic *) fid;

	free(n->dev.name);
	free(n->dev.device_id);
	free(n->dev.device_version);
	free(n->dev.vendor_id);
	free(n->dev.driver);
	free(n->dev.firmware);
	free(n->link.address);
	free(n->link.network_type);
	free(n);
	return 0;
}

static int emu_nic_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	(void) fid;
	(void) bfid;
	(void) flags;
	return -FI_ENOSYS;
}

static int emu_nic_ops_open(struct fid *fid, const char *name,
			    uint64_t flags, void **ops, void *context)
{
	(void) fid;
	(void) name;
	(void) flags;
	(void) ops;
	(void) context;
	return -FI_ENOSYS;
}

static int emu_nic_control(struct fid *fid, int command, void *arg);

static struct fi_ops emu_nic_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = emu_nic_close,
	.bind = emu_nic_bind,
	.control = emu_nic_control,
	.ops_open = emu_nic_ops_open,
};

struct fid_nic *emu_nic_new(unsigned int bus, unsigned int slot)
{
	struct emu_fid_nic *n = calloc(1, sizeof(*n));
	char name[32];

	if (!n)
		return NULL;
	snprintf(name, sizeof(name), "rdmap%us%u", bus, slot);
	n->nic.fid.fclass = FI_CLASS_NIC;
	n->nic.fid.ops = &emu_nic_fi_ops;
	n->nic.device_attr = &n->dev;
	n->nic.bus_attr = &n->bus_attr;
	n->nic.link_attr = &n->link;
	n->bus = bus;
	n->slot = slot;
	n->dev.name = strdup(name);
	n->dev.device_id = strdup("0xefa1");
	n->dev.device_version = strdup("0");
	n->dev.vendor_id = strdup("0x1d0f");
	n->dev.driver = strdup("efa");
	n->dev.firmware = strdup("0.0.0.0");
	n->bus_attr.bus_type = FI_BUS_PCI;
	n->bus_attr.attr.pci.domain_id = 0;
	n->bus_attr.attr.pci.bus_id = (uint8_t) bus;
	n->bus_attr.attr.pci.device_id = (uint8_t) slot;
	n->bus_attr.attr.pci.function_id = 0;
	n->link.address = strdup("00:00:00:00:00:00");
	n->link.network_type = strdup("Ethernet");
	n->link.mtu = EMU_MTU;
	n->link.speed = EMU_NIC_SPEED;
	n->link.state = FI_LINK_UP;
	if (!n->dev.name || !n->dev.device_id || !n->dev.device_version ||
	    !n->dev.vendor_id || !n->dev.driver || !n->dev.firmware ||
	    !n->link.address || !n->link.network_type) {
		emu_nic_close(&n->nic.fid);
		return NULL;
	}
	return &n->nic;
}

/* fi_dupinfo duplicates an entry's NIC through FI_DUP. */
static int emu_nic_control(struct fid *fid, int command, void *arg)
{
	struct emu_fid_nic *n = (struct emu_fid_nic *) fid;
	struct fid_nic **dup = arg;

	if (command != FI_DUP || !dup)
		return -FI_ENOSYS;
	*dup = emu_nic_new(n->bus, n->slot);
	return *dup ? 0 : -FI_ENOMEM;
}
