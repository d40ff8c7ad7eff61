#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The striped message path (test/msg_test.c): every receive checked when
# it completes (length, every byte, CQ data, source, order), matching,
# truncation, peek/claim/discard, multi-receive, cancel, injects, and
# packets on every rail.
#   - over 4 lo rails: tcp;ofi_rxm on libfabric 1.x, tcp itself on 2.x;
#   - over efa's profile (the test provider of test/efa/, 4 NICs), with a
#     rail failing under the stream: rail 0 for good (its transmits
#     complete with errors), rail 3 for good, rail 0 for 1.5 s, rail 1
#     stalled (completions held) and refusing: every message arrives
#     once, in order, and every send completes.
set -e
unset FI_PROVIDER MRL_TEST_PROV FI_MULTIRAIL_CORE_FABRIC
export FI_MULTIRAIL_MESSAGES=striped
run() {
	echo "== $*"
	timeout 300 ./test/msg_test "$@"
}
(
export FI_PROVIDER_PATH="$(pwd)/.libs" FI_MULTIRAIL_RAILS=lo,lo,lo,lo
case $(./test/crowd_test -v) in
1.*)	;;
*)	export MRL_TEST_PROV="tcp;multirail" ;;
esac
run -n 300 -s 1
run -n 300 -s 7
)
export FI_PROVIDER_PATH="$(pwd)/test/.libs:$(pwd)/.libs"
export FI_PROVIDER="multirail;efa" FI_MULTIRAIL_CORE_FABRIC=efa
export MRL_TEST_NO_MULTI_RECV=1 FI_MULTIRAIL_RAIL_TIMEOUT_MS=300
run -n 200 -s 2
FI_EFA_EMU_FAIL_NIC=79 FI_EFA_EMU_FAIL_AFTER=60 run -n 300 -s 3
FI_EFA_EMU_FAIL_NIC=82 FI_EFA_EMU_FAIL_AFTER=150 run -n 300 -s 4
FI_EFA_EMU_FAIL_NIC=79 FI_EFA_EMU_FAIL_AFTER=100 FI_EFA_EMU_FAIL_MS=1500 \
	run -n 300 -s 5
FI_EFA_EMU_FAIL_NIC=80 FI_EFA_EMU_FAIL_AFTER=100 FI_EFA_EMU_FAIL_MODE=stall \
	run -n 300 -s 6
FI_EFA_EMU_FAIL_NIC=80 FI_EFA_EMU_FAIL_AFTER=100 FI_EFA_EMU_FAIL_MODE=refuse \
	run -n 300 -s 8
