#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Two endpoints of one domain, one of them slow to read its CQ: neither
# may take the other's control messages (test/neighbour_test.c).  Over
# the cores where a receive for any source could take a neighbour's
# message: libfabric 2.x's tcp, alone and under the efa test provider.
# libfabric 1.17 is skipped: its native tcp ("net", under the efa test
# provider) completes a tagged receive that matched a message it had kept
# as unexpected without the message's bytes (docs/limits.md), and its
# tcp;ofi_rxm does not have the fault.
set -e
export FI_PROVIDER_PATH="$(pwd)/test/.libs:$(pwd)/.libs"
unset FI_PROVIDER FI_MULTIRAIL_RAILS FI_EFA_EMU_HMEM MRL_TEST_PROV
case $(./test/neighbour_test -v) in
1.*)	echo "SKIP: libfabric $(./test/neighbour_test -v)"; exit 77 ;;
esac
run() {
	echo "== $*"
	timeout 300 "$@"
}
for rails in lo lo,lo,lo,lo; do
	MRL_TEST_PROV="tcp;multirail" FI_MULTIRAIL_RAILS=$rails \
		run ./test/neighbour_test
done
FI_PROVIDER="multirail;efa" run ./test/neighbour_test
