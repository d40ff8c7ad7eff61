#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Writes the hwloc 2.x XML topologies that test/topo_test and
# fi_multirail_topo --xml read:
#   p5.xml    p5.48xlarge-like: 2 NUMA nodes, 8 GPUs, each behind its own
#             PCIe switch with 4 EFA NICs (OpenFabrics rdmap<bus>s0),
#             plus an ENA eth0 on NUMA node 0.
#   2gpu.xml  GPU 0000:17:00.0 on node 0, GPU 0000:b1:00.0 on node 1, NICs
#             eth1 and eth2 on node 0 under GPU 0's host bridge.
#   flat.xml  VM: 2 NUMA nodes, one host bridge hwloc could not place (it
#             hangs from the machine), 2 GPUs and NICs eth1..eth4 on it.
# Usage: gen-fixtures.sh [OUTDIR]
#
# The naming is the contract topo_test relies on: in p5.xml GPU g sits on
# bus B = 0x53 + 0x11 * g and its NICs on buses B-4 .. B-1, named
# rdmap<decimal bus>s0; GPUs 0-3 are on node 0, 4-7 on node 1.
set -e
out=${1:-.}
mkdir -p "$out"
gp=100

next_gp() {
	gp=$((gp + 1))
}

header() {
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000ffff" complete_cpuset="0x0000ffff" allowed_cpuset="0x0000ffff" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003" gp_index="1">
    <info name="Backend" value="multirail-fixture"/>
EOF
}

footer() {
	echo '  </object>'
	echo '</topology>'
}

# cpus_and_node PKG: one NUMA node and 8 cores of one PU each.
cpus_and_node() {
	pkg=$1
	cpuset=$(printf '0x%08x' $((0xff << (8 * pkg))))
	nodeset=$(printf '0x%08x' $((1 << pkg)))
	echo "    <object type=\"NUMANode\" os_index=\"$pkg\" cpuset=\"$cpuset\" complete_cpuset=\"$cpuset\" nodeset=\"$nodeset\" complete_nodeset=\"$nodeset\" gp_index=\"$((10 + pkg))\" local_memory=\"1073741824\"/>"
	for c in 0 1 2 3 4 5 6 7; do
		cpu=$((8 * pkg + c))
		set1=$(printf '0x%08x' $((1 << cpu)))
		echo "    <object type=\"Core\" os_index=\"$cpu\" cpuset=\"$set1\" complete_cpuset=\"$set1\" nodeset=\"$nodeset\" complete_nodeset=\"$nodeset\" gp_index=\"$((20 + 2 * cpu))\">"
		echo "      <object type=\"PU\" os_index=\"$cpu\" cpuset=\"$set1\" complete_cpuset=\"$set1\" nodeset=\"$nodeset\" complete_nodeset=\"$nodeset\" gp_index=\"$((21 + 2 * cpu))\"/>"
		echo "    </object>"
	done
}

package_open() {
	pkg=$1
	cpuset=$(printf '0x%08x' $((0xff << (8 * pkg))))
	nodeset=$(printf '0x%08x' $((1 << pkg)))
	echo "  <object type=\"Package\" os_index=\"$pkg\" cpuset=\"$cpuset\" complete_cpuset=\"$cpuset\" nodeset=\"$nodeset\" complete_nodeset=\"$nodeset\" gp_index=\"$((2 + pkg))\">"
	cpus_and_node "$pkg"
}

# hostbridge_open FIRSTBUS LASTBUS
hostbridge_open() {
	next_gp
	printf '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">\n' \
		$gp "$1" "$2"
}

# bridge_open BUS DEV DEPTH SECONDARY SUBORDINATE VENDOR:DEVICE
bridge_open() {
	next_gp
	printf '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" bridge_pci="0000:[%02x-%02x]" pci_busid="0000:%02x:%02x.0" pci_type="0604 [%s] [0000:0000] 00" pci_link_speed="31.507692">\n' \
		$gp "$3" "$4" "$5" "$1" "$2" "$6"
}

close() {
	echo '</object>'
}

# pcidev BUS DEV CLASS VENDOR:DEVICE [OSDEV_NAME OSDEV_TYPE]
pcidev() {
	next_gp
	printf '<object type="PCIDev" gp_index="%d" pci_busid="0000:%02x:%02x.0" pci_type="%s [%s] [%s] 00" pci_link_speed="31.507692"' \
		$gp "$1" "$2" "$3" "$4" "$4"
	shift
	if [ -z "$4" ]; then
		echo '/>'
		return
	fi
	echo '>'
	next_gp
	echo "<object type=\"OSDev\" gp_index=\"$gp\" name=\"$4\" osdev_type=\"$5\"/>"
	close
}

# Downstream port DEV on bus SW leading to bus CHILD holding one device.
port_with_dev() {
	bridge_open "$1" "$2" 3 "$3" "$3" 1000:c030
	bus=$3
	shift 3
	pcidev "$bus" 0 "$@"
	close
}

# p5_switch G: host bridge, root port, PCIe switch holding GPU G + 4 EFA.
p5_switch() {
	b=$((0x53 + 0x11 * $1))
	r=$((b - 0x0c))
	hostbridge_open $r $((b + 4))
	bridge_open $r 1 1 $((r + 1)) $((b + 4)) 1022:1483
	bridge_open $((r + 1)) 0 2 $((r + 2)) $((b + 4)) 1000:c030
	for j in 0 1 2 3; do
		nb=$((b - 4 + j))
		port_with_dev $((r + 2)) $j $nb 0200 1d0f:efa1 "rdmap${nb}s0" 3
	done
	port_with_dev $((r + 2)) 4 $b 0302 10de:2330
	close
	close
	close
}

gen_p5() {
	header
	for pkg in 0 1; do
		package_open $pkg
		if [ $pkg = 0 ]; then
			hostbridge_open 0x20 0x21
			port_with_dev 0x20 1 0x21 0200 1d0f:ec20 eth0 2
			close
		fi
		for g in 0 1 2 3; do
			p5_switch $((4 * pkg + g))
		done
		echo '  </object>'
	done
	footer
}

gen_2gpu() {
	header
	package_open 0
	hostbridge_open 0x16 0x19
	bridge_open 0x16 1 1 0x17 0x17 8086:2030
	pcidev 0x17 0 0302 10de:2330
	close
	bridge_open 0x16 2 1 0x18 0x18 8086:2031
	pcidev 0x18 0 0200 8086:1572 eth1 2
	close
	bridge_open 0x16 3 1 0x19 0x19 8086:2032
	pcidev 0x19 0 0200 8086:1572 eth2 2
	close
	close
	echo '  </object>'
	package_open 1
	hostbridge_open 0xb0 0xb1
	bridge_open 0xb0 1 1 0xb1 0xb1 8086:2030
	pcidev 0xb1 0 0302 10de:2330
	close
	close
	echo '  </object>'
	footer
}

# In the VM the packages carry no I/O: hwloc hangs the bus from the machine.
gen_flat() {
	header
	package_open 0
	echo '  </object>'
	package_open 1
	echo '  </object>'
	hostbridge_open 0x00 0x00
	pcidev 0 4 0302 10de:2330
	pcidev 0 5 0302 10de:2330
	for i in 1 2 3 4; do
		pcidev 0 $((5 + i)) 0200 1af4:1041 "eth$i" 2
	done
	close
	footer
}

gen_p5 >"$out/p5.xml"
gen_2gpu >"$out/2gpu.xml"
gen_flat >"$out/flat.xml"
