#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Scatter-gather: fi_writemsg, fi_readmsg (with and without CQ data) and
# fi_sendmsg of 1..256 local and 1..256 remote iovs of odd sizes, every
# byte and the one completion checked (test/sg_test.c), over 4 lo rails of
# tcp;ofi_rxm (tcp on 2.x), one rail, 4 shm rails, and both of efa's fabrics through
# the efa test provider (one remote iov, one local iov per RMA).
set -e
run() {
	echo "== $*"
	timeout 300 ./test/sg_test "$@"
}
unset FI_MULTIRAIL_RAILS FI_MULTIRAIL_CORE_FABRIC
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER
FI_MULTIRAIL_RAILS=lo,lo,lo,lo run -r 40
FI_MULTIRAIL_RAILS=lo,lo,lo,lo FI_MULTIRAIL_STRIPE_MIN=2048 \
	FI_MULTIRAIL_CHUNK_SIZE=4096 run -r 20
FI_MULTIRAIL_RAILS=lo run -r 12
FI_PROVIDER="multirail;shm" FI_MULTIRAIL_RAILS=shm,shm,shm,shm run -r 12
export FI_PROVIDER_PATH="$(pwd)/test/.libs:$(pwd)/.libs"
export FI_PROVIDER="multirail;efa"
for fabric in efa-direct efa; do
	FI_MULTIRAIL_CORE_FABRIC=$fabric run -r 20
done
