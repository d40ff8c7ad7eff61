#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Rail choice by locality, end to end, on generated hwloc fixtures
# (test/topo/gen-fixtures.sh).  Loopback rails are placed on a fixture's
# NICs with FI_MULTIRAIL_RAILS=lo@NIC,...; two processes write, and the
# per-rail byte counters (fi_open_ops) must show bytes on exactly the
# expected rails (rma_test -L).  fi_info's first entry must be the rails
# nearest the process's GPU or NUMA node.
#
# p5.xml: GPU g on bus 0x53 + 0x11 g, its NICs rdmap<bus>s0 on the four
# buses below; GPUs 0-3 and their NICs on NUMA node 0, 4-7 on node 1.
# The buffers here are on this host's node 0, read as the fixture's node 0.
set -e
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER FI_MULTIRAIL_GPU FI_MULTIRAIL_GPU_PCI FI_MULTIRAIL_POLICY
fixtures=$(mktemp -d /tmp/mrl-loc-XXXXXX)
trap 'rm -rf "$fixtures"' EXIT
sh "${srcdir:-.}/test/topo/gen-fixtures.sh" "$fixtures" >/dev/null

nics() {	# nics FIRST_BUS COUNT -> lo@rdmap<bus>s0,... (decimal buses)
	b=$1; n=$2; out=
	while [ "$n" -gt 0 ]; do
		out="$out${out:+,}lo@rdmap${b}s0"; b=$((b + 1)); n=$((n - 1))
	done
	echo "$out"
}
G0=$(nics 79 4)		# GPU0's NICs, node 0
G1=$(nics 96 2)		# two of GPU1's, node 0
G4=$(nics 147 4)	# GPU4's, node 1
G4B=$(nics 149 2)	# two of GPU4's

# every op striped in 4 KiB chunks over all the rails it may use
export FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096
run() {
	echo "== $*"
	timeout 300 ./test/rma_test -o write -S 1048576 -W 4 "$@"
}

# Host memory on node 0: GPU0's NICs (node 0) only, not GPU4's (node 1).
FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml FI_MULTIRAIL_RAILS=$G0,$G4 \
	run -L 0f
# The target's registration is near its rails 2-7, ours near 0-5: the
# rails nearest both sides, 2-5, carry everything.
FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml FI_MULTIRAIL_RAILS=$G0,$G1,$(nics 147 2) \
	run -E "FI_MULTIRAIL_RAILS=$G4B,$G0,$G1" -L 3c
# Nothing in common: our side decides (rails 0-3).
FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml FI_MULTIRAIL_RAILS=$G0,$G4 \
	run -E "FI_MULTIRAIL_RAILS=$G4,$G0" -L 0f
# A VM whose NICs hwloc cannot place: every rail.
FI_MULTIRAIL_TOPO_XML=$fixtures/flat.xml \
	FI_MULTIRAIL_RAILS=lo@eth1,lo@eth2,lo@eth3,lo@eth4 run -L 0f
# No topology information at all (plain lo): every rail.
FI_MULTIRAIL_RAILS=lo,lo,lo,lo run -L 0f

# fi_info's first entry.
first_domain() {
	env "$@" "${FI_INFO:-fi_info}" -p "tcp;ofi_rxm;multirail" |
		sed -n 's/^ *domain: //p' | head -1
}
expect_first() {	# expect_first WHAT WANT [env...]
	what=$1; want=$2; shift 2
	got=$(first_domain "$@")
	if [ "$got" != "$want" ]; then
		echo "FAIL: $what: first fi_info domain '$got', expected '$want'"
		exit 1
	fi
	echo "ok $what: $got"
}
plus() { echo "$1" | tr ',' '+'; }
PCI=0000:53:00.0,0000:64:00.0,0000:75:00.0,0000:86:00.0
PCI=$PCI,0000:97:00.0,0000:a8:00.0,0000:b9:00.0,0000:ca:00.0
p5="FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml"
expect_first "GPU 4" "$(plus "$G4")" "$p5" FI_MULTIRAIL_RAILS=$G0,$G4 \
	FI_MULTIRAIL_GPU=4 FI_MULTIRAIL_GPU_PCI=$PCI
expect_first "GPU 0, 2 rails per GPU" "lo@rdmap79s0+lo@rdmap80s0" "$p5" \
	FI_MULTIRAIL_RAILS=$G0,$G4 FI_MULTIRAIL_GPU=0 \
	FI_MULTIRAIL_GPU_PCI=$PCI FI_MULTIRAIL_RAILS_PER_GPU=2
# (a container's cpuset reads as a binding)
[ "$(nproc)" = "$(nproc --all)" ] &&
expect_first "no GPU, not bound" "$(plus "$G0,$G4")" "$p5" \
	FI_MULTIRAIL_RAILS=$G0,$G4
if [ "$(nproc)" -gt 1 ]; then
	export FI_MULTIRAIL_RAILS=$G0,$G4 FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml
	got=$(taskset -c 0 sh -c '"${FI_INFO:-fi_info}" -p "tcp;ofi_rxm;multirail"' |
	      sed -n 's/^ *domain: //p' | head -1)
	[ "$got" = "$(plus "$G0")" ] ||
		{ echo "FAIL: bound to CPU 0 (node 0): first domain '$got'"; exit 1; }
	echo "ok bound to CPU 0 (node 0): $got"
fi
echo PASS
