#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# multirail over efa's profile: the test provider in test/efa/ is named
# "efa" (efa's fabrics, domains rdmap<bus>s0-rdm, 4 bytes of CQ data,
# 32-bit provider keys, FI_MR_LOCAL, 1 rma_iov, no ordering between or
# within writes) and carries its emulated NICs over loopback.  Each case
# runs under the mission's spelling, FI_PROVIDER="multirail;efa".
set -e
export FI_PROVIDER_PATH="$(pwd)/test/.libs:$(pwd)/.libs"
unset FI_MULTIRAIL_RAILS FI_MULTIRAIL_POLICY FI_MULTIRAIL_GPU \
	FI_MULTIRAIL_GPU_PCI FI_EFA_EMU_NICS MRL_TEST_PROV
export FI_PROVIDER="multirail;efa"
run() {
	echo "== $*"
	timeout 300 "$@"
}
rma() {
	run ./test/rma_test "$@"
}
# efa alone: the test provider itself, writes placed second half first
FI_PROVIDER=efa MRL_TEST_PROV=efa rma -o all -S 1048576 -W 8
# and with every RMA through the path GPU memory takes (efa_emu_hmem.c)
FI_PROVIDER=efa MRL_TEST_PROV=efa FI_EFA_EMU_HMEM=all rma -o all -S 1048576 -W 8
# every entry carries its first rail's NIC (aws-ofi-nccl places entries by
# its PCI address), as efa's own entries do
run ./test/getinfo_test nic
FI_PROVIDER=efa run ./test/getinfo_test nic
fixtures=$(mktemp -d /tmp/mrl-efa-XXXXXX)
trap 'rm -rf "$fixtures"' EXIT
sh "${srcdir:-.}/test/topo/gen-fixtures.sh" "$fixtures" >/dev/null
# multirail over each of efa's fabrics: efa-direct (no tagged messages:
# control on an endpoint of its own; one local iov per RMA; no RMA inject)
# and efa
for fabric in efa-direct efa; do
export FI_MULTIRAIL_CORE_FABRIC=$fabric
echo "=== over $fabric"
got=$("${FI_INFO:-fi_info}" | sed -n 's/^ *fabric: //p' | sort -u)
[ "$got" = "multirail/efa/$fabric" ] ||
	{ echo "FAIL: fabric '$got', expected multirail/efa/$fabric"; exit 1; }
# the 4 NICs of GPU 0 (the default), striped; every rail must carry bytes
rma -o all -S 16777216 -W 8 -A
FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096 \
	rma -o all -S 1048576 -W 4 -A
# writedata's CQ data after every byte, with writes that land out of order
# (tcp's in-order connections hide a message sent too early; this catches
# it): cut over two rails, of one iov and of two, the entry's len the
# write's, raised once
FI_MULTIRAIL_RAILS=rdmap79s0-rdm,rdmap80s0-rdm FI_MULTIRAIL_STRIPE_MIN=2048 \
	FI_MULTIRAIL_CHUNK_SIZE=4096 rma -I -o writedata -S 1048576 -W 8 -A
FI_MULTIRAIL_RAILS=rdmap79s0-rdm,rdmap80s0-rdm FI_MULTIRAIL_STRIPE_MIN=2048 \
	FI_MULTIRAIL_CHUNK_SIZE=4096 rma -o writedata -S 1048576 -W 8 -A
# and one at a time, over the 4 NICs
rma -o writedata -S 16777216 -W 1 -A
# names cut to FI_NAME_MAX (rail 0 and, over efa-direct, the control
# endpoint): the rest learned in a HELLO, then every rail carries bytes
rma -o write -S 4194304 -W 4 -C -A
# names cut to 32 bytes: over efa-direct the control endpoint's address
# rides as its difference from rail 0's (aws-ofi-nccl passes 56 bytes, too
# few for real efa's two 32-byte addresses whole); over efa, rail 0's alone
RMA_NAME_MAX=32 rma -o write -S 4194304 -W 4 -C -A
# the other spelling
(unset FI_PROVIDER; MRL_TEST_PROV="efa;multirail" rma -o all -S 4194304 -W 8)
# FI_THREAD_DOMAIN: the lean CQ read; a quiet target finds the CQ data of
# every rail on the idle rail it reads
rma -T -o writedata -X 1000 -S 65536 -W 16
# rma.sh's -Y under this spelling: every word lands, every rail carries its
# share (the test provider hands completions on in trickles, so it does not
# fill the reader the way tcp does: rma.sh's runs are the ones that catch
# rails read out of turn)
rma -T -o write -Y 100000 -W 64
# a core without fi_cq_readfrom (nor FI_SOURCE): the leased polls of a
# quiet endpoint read with it, so the first -FI_ENOSYS turns leases off for
# that endpoint, with one warning (each process: at most one), and every op
# lands
out=$(FI_LOG_LEVEL=warn FI_EFA_EMU_NO_READFROM=1 \
	rma -T -o writedata -X 1000 -S 65536 -W 16 2>&1) ||
	{ echo "$out"; exit 1; }
warned=$(echo "$out" | grep -c "has no fi_cq_readfrom: no leased polls" ||
	true)
[ "$warned" -ge 1 ] && [ "$warned" -le 2 ] ||
	{ echo "$out" | tail -20; echo "FAIL: $warned warnings of leases off"; exit 1; }
# FI_THREAD_SAFE over 32-bit keys: threads share endpoints, CQs, and the
# domain's key generation (concurrent registrations); warnings logged,
# so that a rare failure says which rail went out and why
run env FI_LOG_LEVEL=warn ./test/mt_test
# both ends connecting at once on 2 domains (threads) x 8 endpoints, as
# NCCL's RDMA protocol does: every byte checked when its message arrives.
# (With the GPU path, FI_EFA_EMU_HMEM=all -e 4 -s 4194304, the test
# provider over libfabric 2.x tcp hands a staged write's answer to another
# endpoint and the run stalls: docs/clients.md.)
run ./test/xconn_test -d 2 -e 8 -r 10
# GPU memory's path (test/efa/efa_emu_hmem.c), taken by every RMA here, host
# memory too: the test provider's own messages and copies at both ends, as
# efa with GPUDirect is emulated where CUDA is; bytes and CQ data checked
FI_EFA_EMU_HMEM=all rma -o all -S 16777216 -W 8 -A
FI_EFA_EMU_HMEM=all FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096 \
	rma -o all -S 1048576 -W 4 -A
# a NIC that answers -FI_EAGAIN in bursts, completions that come late
FI_EFA_EMU_EAGAIN_EVERY=7 FI_EFA_EMU_EAGAIN_BURST=3 FI_EFA_EMU_DELAY_US=300 \
	FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096 \
	rma -o all -S 1048576 -W 8 -A
# the same NIC under small ops: an op it refuses was taken on the fast path
# and goes the general way from its record (every word, every kind back);
# the key question it refuses goes out before the next op to that key, so
# the other rails' keys come back early (no rail above twice its share: a
# question left to progress's one try a call, which the refusals' cycle
# can meet every time, put 19522 of 20000 ops on rail 0)
FI_EFA_EMU_EAGAIN_EVERY=5 FI_EFA_EMU_EAGAIN_BURST=2 rma -T -o write -Y 20000 -W 64 -B
FI_EFA_EMU_EAGAIN_EVERY=5 FI_EFA_EMU_EAGAIN_BURST=2 rma -o all -S 4096 -W 32 -A
# one NIC refusing in bursts, keys in turn: a refusal turns its own op to the
# general way, not the other rails' ops (at most one in 16 goes there; each
# of rail 3's refusals alone was 1 in 8 when a refusal turned every op)
FI_EFA_EMU_EAGAIN_NIC=82 FI_EFA_EMU_EAGAIN_EVERY=10 FI_EFA_EMU_EAGAIN_BURST=2 \
	rma -T -o write -Y 40000 -W 64 -G 4
# bad input, refused as over tcp
FI_MULTIRAIL_RAILS=rdmap79s0-rdm,rdmap80s0-rdm run ./test/badinput_test
# endpoint options on every rail (or on rail 0, or refused); message limits
# of 64 bytes leave the control channel room; a refusing rail (rail 2's
# NIC) fails the call and the rails before it are set back
run ./test/opt_test
FI_EFA_EMU_OPT_REFUSE=81 run ./test/opt_test -r
# A target that starts progressing 3 s late: the test provider takes the
# writes and completes none until then, three times the deadline.  The
# target has not answered yet, so FI_MULTIRAIL_CONNECT_TIMEOUT_MS judges
# rail 0, not the rails' deadline (which would take rail 0 out and fail
# every op -FI_EHOSTUNREACH).
FI_MULTIRAIL_RAIL_TIMEOUT_MS=1000 rma -o write -X 16 -S 16777216 -W 8 -J 3000
# Rail failure (docs/reliability.md), NIC 82 is rail 3.  Its transmits fail
# for 1.5 s after its 50th: the failed chunks go to the other rails, every
# op succeeds, and a probe brings the rail back.  The fault starts with a
# transmit of bytes (the test provider does not count zero-byte fences),
# and every op is cut in 4 KiB chunks over the rails: it starts under
# chunks, as these cases mean.
(
export FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096
# A stall that begins under a send's fence (FAIL_START=fence), nothing else
# on the rail: the fence counts as the rail's work, the rail goes out after
# the deadline, and the send goes on (over efa a completed write has
# landed: nothing the fence covers can be lost); a probe brings the rail
# back.
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=5 FI_EFA_EMU_FAIL_START=fence \
	FI_EFA_EMU_FAIL_MS=1500 FI_EFA_EMU_FAIL_MODE=stall \
	FI_MULTIRAIL_RAIL_TIMEOUT_MS=300 \
	rma -o write -S 65536 -W 8 -H 3:rejoin:fence
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=50 FI_EFA_EMU_FAIL_MS=1500 \
	rma -o all -S 16777216 -W 8 -H 3:rejoin
# It stalls for 2.5 s (completions held): after the 300 ms deadline its
# chunks are copied elsewhere; it rejoins once the stall ends.
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=50 FI_EFA_EMU_FAIL_MS=2500 \
	FI_EFA_EMU_FAIL_MODE=stall FI_MULTIRAIL_RAIL_TIMEOUT_MS=300 \
	rma -o all -S 16777216 -W 8 -H 3:rejoin
# It never comes back: the run completes on three rails.
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=50 rma -o all -S 16777216 -W 8 -H 3
# Its core refuses every post (-FI_EAGAIN) for 1.5 s: chunks go to the other
# rails, and the flushes before a send, refused too, count toward the
# deadline: the rail goes out, the send goes on, a probe brings it back.
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=50 FI_EFA_EMU_FAIL_MS=1500 \
	FI_EFA_EMU_FAIL_MODE=refuse FI_MULTIRAIL_RAIL_TIMEOUT_MS=300 \
	rma -o all -S 16777216 -W 8 -H 3:rejoin:refused
# For ever: the run completes on three rails (a send waited for ever when
# only the chunks' refusals counted)
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=50 FI_EFA_EMU_FAIL_MODE=refuse \
	FI_MULTIRAIL_RAIL_TIMEOUT_MS=300 rma -o all -S 16777216 -W 8 -H 3:refused
)
# The target dies: every op to it comes back, with an error, in bounded time.
rma -K
# Rail 0 (NIC 79) fails under the ops to one registration, and the first op
# to another comes once it is out: the key question goes on a rail in
# service, the answer comes back on it (the target's rail 0 fails too,
# after the first answer), and the op waits for it (taken, parked), then
# goes on the rails left.  Control endpoints (efa-direct) are rail 0's alone.
[ "$fabric" = efa-direct ] ||
	FI_EFA_EMU_FAIL_NIC=79 FI_EFA_EMU_FAIL_AFTER=200 \
	rma -T -o write -Y 4000 -W 64 -G 2 -V -E FI_EFA_EMU_FAIL_AFTER=1
# The same with no key learned first: rail 0 fails under ops that have its
# key alone (the target's rail 0 never answers); they wait for the other
# rails' keys (parked), asked again on rail 1, instead of failing.
[ "$fabric" = efa-direct ] ||
	FI_EFA_EMU_FAIL_NIC=79 FI_EFA_EMU_FAIL_AFTER=20 \
	rma -T -o write -Y 4000 -W 64 -G 2 -M -E FI_EFA_EMU_FAIL_AFTER=0
# The same over 8 registrations, each completion held 2 ms: their questions
# all go again on rail 1 at once, more than the endpoint's free control
# buffers take; those that wait for a buffer keep their ops waiting too,
# and go as buffers come back (before: those ops failed).
[ "$fabric" = efa-direct ] ||
	FI_EFA_EMU_FAIL_NIC=79 FI_EFA_EMU_FAIL_AFTER=20 FI_EFA_EMU_DELAY_US=2000 \
	rma -T -o write -Y 4000 -W 64 -G 8 -M -E FI_EFA_EMU_FAIL_AFTER=0

# Locality: NICs of GPU 0 (node 0) and of GPU 4 (node 1) in test/topo's
# p5.xml; host memory on node 0 goes over GPU 0's four.
(
export FI_EFA_EMU_NICS=79=lo,80=lo,81=lo,82=lo,147=lo,148=lo,149=lo,150=lo
export FI_MULTIRAIL_TOPO_XML=$fixtures/p5.xml
FI_MULTIRAIL_STRIPE_MIN=2048 FI_MULTIRAIL_CHUNK_SIZE=4096 \
	rma -o write -S 1048576 -W 4 -L 0f
PCI=0000:53:00.0,0000:64:00.0,0000:75:00.0,0000:86:00.0
PCI=$PCI,0000:97:00.0,0000:a8:00.0,0000:b9:00.0,0000:ca:00.0
got=$(FI_MULTIRAIL_GPU=4 FI_MULTIRAIL_GPU_PCI=$PCI "${FI_INFO:-fi_info}" |
      sed -n 's/^ *domain: //p' | head -1)
want=rdmap147s0-rdm+rdmap148s0-rdm+rdmap149s0-rdm+rdmap150s0-rdm
[ "$got" = "$want" ] ||
	{ echo "FAIL: GPU 4: first domain '$got', expected '$want'"; exit 1; }
echo "ok GPU 4: first domain $got"
)
done

# Over efa-direct a peer known by rail 0 alone is completed only by a
# message its own rail 0 sent: a liar's claim of it, first, is not taken.
(unset FI_PROVIDER; FI_MULTIRAIL_CORE_FABRIC=efa-direct run ./test/claim_test)

# GPU memory's path across the emulated testbed (root, netns, tc tbf; else
# skipped): the NICs are 4 veth rails of 1000 Mbit/s between two network
# namespaces, every RMA carried as device memory is (FI_EFA_EMU_HMEM=all:
# the test provider's own messages and copies at both ends), every byte and
# CQ data checked, every rail carrying bytes.
TB="${srcdir:-.}/fabtests-ext/scripts/fi_multirail_testbed"
exec 9>/tmp/mrl-testbed.lock
flock -w 900 9 2>/dev/null || true
if ip netns list 2>/dev/null | grep -qE '^mrl_(a|b)\b'; then
	echo "SKIP (part): the emulated testbed is in use"
elif ! "$TB" up 4 1000 >testbed-efa.log 2>&1; then
	"$TB" down >/dev/null 2>&1
	echo "SKIP (part): no emulated testbed here (root, netns and tc tbf needed)"
else
	trap '"$TB" down >/dev/null 2>&1; rm -rf "$fixtures"' EXIT
	for fabric in efa-direct efa; do
		FI_MULTIRAIL_CORE_FABRIC=$fabric FI_EFA_EMU_HMEM=all \
		FI_EFA_EMU_NICS=79=vA0,80=vA1,81=vA2,82=vA3 \
			rma -N mrl_a,mrl_b -E FI_EFA_EMU_NICS=79=vB0,80=vB1,81=vB2,82=vB3 \
			-o all -S 16777216 -W 8 -A
	done
	"$TB" down >/dev/null 2>&1
fi
echo PASS
