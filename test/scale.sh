#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The cost of a peer in the AV (test/scale_test.c): 16384 peers inserted
# one at a time, over 1 and 4 loopback rails; the time per insert must not
# grow with the AV.
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER MRL_TEST_PROV
rc=0
for rails in lo lo,lo,lo,lo; do
	echo "== FI_MULTIRAIL_RAILS=$rails"
	FI_MULTIRAIL_RAILS=$rails timeout 300 ./test/scale_test -n 16384 || rc=1
done
exit $rc
