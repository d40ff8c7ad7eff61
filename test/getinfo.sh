#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# fi_getinfo as applications drive it (test/getinfo_test.c), under both
# spellings of the provider: hints prov_name and FI_PROVIDER.
export FI_PROVIDER_PATH="$(pwd)/.libs"
export FI_MULTIRAIL_RAILS=lo,lo
rc=0
echo "== hints: tcp;ofi_rxm;multirail"
env -u FI_PROVIDER MRL_TEST_PROV="tcp;ofi_rxm;multirail" \
	timeout 60 ./test/getinfo_test || rc=1
echo "== FI_PROVIDER=multirail;tcp"
env -u MRL_TEST_PROV FI_PROVIDER="multirail;tcp" \
	timeout 60 ./test/getinfo_test || rc=1
exit $rc
