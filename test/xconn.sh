#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Both ends of several endpoint pairs write to each other before any
# connection exists (test/xconn_test.c), over 4 lo rails of tcp;ofi_rxm
# (libfabric 1.x) or tcp (2.x): every op succeeds, every byte is checked
# when its message arrives, and no rail of a pair is opened from both
# ends (RAIL_UP, docs/design.md).  Over 1.17 the writes' flushes waited
# behind busy rails that filled the reader every call, an idle rail never
# read (mrl_read_due): the sends after them failed with -FI_EIO.
set -e
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER MRL_TEST_PROV
export FI_MULTIRAIL_RAILS=lo,lo,lo,lo
# 2.x: over tcp itself, as crowd.sh runs (its rxm is slow to take many
# connections)
case $(./test/crowd_test -v) in
1.*)	;;
*)	export MRL_TEST_PROV="tcp;multirail" ;;
esac
run() {
	echo "== $*"
	timeout 300 ./test/xconn_test "$@"
}
run -d 2 -e 2 -r 10 -s 1048576
run -d 1 -e 4 -r 5 -s 262144
run -d 2 -e 8 -r 10 -s 1048576
# names cut to 56 bytes, as aws-ofi-nccl takes them: each end knows the
# other by rail 0 alone, both ask at once, and their HELLOs cross; the
# writes must leave rail 0, and the crossing questions and answers are no
# liar's: multirail must not warn of them (a HELLO of the peer's own, a
# key asked again and answered twice)
out=$(FI_LOG_LEVEL=warn run -d 2 -e 4 -r 5 -s 262144 -n 56 2>&1) ||
	{ echo "$out"; echo "FAIL: xconn_test -n 56"; exit 1; }
echo "$out"
warns=$(echo "$out" | grep -c -e 'not in answer to our HELLO' \
	-e 'KEY_RESP that answers no request' || true)
[ "$warns" = 0 ] || { echo "FAIL: $warns warning(s) of a liar"; exit 1; }
