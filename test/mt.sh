#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# FI_THREAD_SAFE: threads sharing an endpoint and CQ, and one endpoint per
# thread on a shared domain (test/mt_test.c), over 2 and 4 loopback rails.
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER
rc=0
for rails in lo,lo lo,lo,lo,lo; do
	echo "== $rails"
	FI_LOG_LEVEL=warn FI_MULTIRAIL_RAILS=$rails timeout 120 ./test/mt_test || rc=1
done
exit $rc
