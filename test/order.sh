#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Ordering on rails of very different speeds: fi_writedata's CQ data after
# its bytes, and a message, or an op sent whole on rail 0 (inject with CQ
# data), sent after writes completed, after their bytes.
# The emulated testbed (fabtests-ext/scripts/fi_multirail_testbed) with two rails at 1000 and two at
# 50 Mbit/s, initiator and target in its two namespaces, ops forced into
# 64 KiB chunks so every op crosses fast and slow rails.  The target checks
# every byte of an op at the moment it reads that op's CQ entry, for many
# iterations.  Needs root and network namespaces; skipped (77) without.
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER FI_MULTIRAIL_RAILS
TB="${srcdir:-.}/fabtests-ext/scripts/fi_multirail_testbed"

# A testbed already up belongs to someone else (a benchmark): leave it.
# make check runs tests side by side: the testbed scripts take turns
exec 9>/tmp/mrl-testbed.lock
flock -w 900 9 2>/dev/null || true
if ip netns list 2>/dev/null | grep -qE '^mrl_(a|b)\b'; then
	echo "SKIP: the emulated testbed is in use (a benchmark running?)"
	exit 77
fi
# A host that cannot build the testbed (no root, no netns, no tbf) skips.
if ! "$TB" up 4 1000,1000,50,50 >testbed-order.log 2>&1; then
	cat testbed-order.log
	"$TB" down >/dev/null 2>&1
	echo "SKIP: no emulated testbed here (root, netns and tc tbf needed)"
	exit 77
fi
trap '"$TB" down >/dev/null 2>&1' EXIT INT TERM

echo "== writedata over 1000,1000,50,50 Mbit/s rails"
FI_MULTIRAIL_STRIPE_MIN=4096 FI_MULTIRAIL_CHUNK_SIZE=65536 \
	timeout 300 ./test/rma_test -N mrl_a,mrl_b -o writedata -S 4194304 \
	-W 4 -n 30 -A || exit 1
# write, complete, then send: the target checks the bytes when the message
# arrives, which rail 0 carries ahead of the slow rails unless fenced
echo "== write then send over 1000,1000,50,50 Mbit/s rails"
FI_MULTIRAIL_STRIPE_MIN=4096 FI_MULTIRAIL_CHUNK_SIZE=65536 \
	timeout 300 ./test/rma_test -N mrl_a,mrl_b -o write -S 4194304 -W 4 -A || exit 1
# write, complete, then a 0-byte fi_inject_writedata on rail 0 as the flag
# (as atomics, it is sent whole on rail 0): the target checks every byte
# when the flag's CQ entry arrives
echo "== write then inject_writedata flag over 1000,1000,50,50 Mbit/s rails"
FI_MULTIRAIL_STRIPE_MIN=4096 FI_MULTIRAIL_CHUNK_SIZE=65536 \
	timeout 300 ./test/rma_test -N mrl_a,mrl_b -o write -S 4194304 -W 4 \
	-A -F || exit 1
# the same over efa's profile (test/efa: its NICs mapped to the testbed's
# veths, each side its own), both fabrics: efa-direct places the halves of
# each write out of order and delays every other write
for fabric in efa-direct efa; do
	echo "== writedata over efa ($fabric) on 1000,1000,50,50 Mbit/s rails"
	FI_PROVIDER="multirail;efa" FI_MULTIRAIL_CORE_FABRIC=$fabric \
	FI_PROVIDER_PATH="$(pwd)/test/.libs:$(pwd)/.libs" \
	FI_EFA_EMU_NICS=79=vA0,80=vA1,81=vA2,82=vA3 \
	FI_MULTIRAIL_STRIPE_MIN=4096 FI_MULTIRAIL_CHUNK_SIZE=65536 \
		timeout 300 ./test/rma_test -N mrl_a,mrl_b -o writedata \
		-S 4194304 -W 4 -n 10 -A \
		-E FI_EFA_EMU_NICS=79=vB0,80=vB1,81=vB2,82=vB3 || exit 1
done
# rails found, not named: fi_getinfo as stock fabtests -E drives it (a
# source with a port only) must open on the testbed's NICs
echo "== fi_getinfo over auto-discovered rails, FI_PROVIDER=multirail;tcp"
ip netns exec mrl_a env FI_PROVIDER="multirail;tcp" \
	timeout 60 ./test/getinfo_test || exit 1
