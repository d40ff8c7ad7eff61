#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Every FI_MULTIRAIL_* variable the provider defines (fi_info -e) has its
# help line there, a row in README.md and an entry in man/fi_multirail.7.
export FI_PROVIDER_PATH="$(pwd)/.libs"
src=${srcdir:-.}
vars=$("${FI_INFO:-fi_info}" -e 2>/dev/null | tr -cd '\11\12\15\40-\176' |
	sed -n 's/^# \(FI_MULTIRAIL_[A-Z_]*\):.*/\1/p' | sort -u)
[ -n "$vars" ] || { echo "FAIL: fi_info -e lists no FI_MULTIRAIL_ variable"; exit 1; }
rc=0
for v in $vars; do
	help=$("${FI_INFO:-fi_info}" -e 2>/dev/null | tr -cd '\11\12\15\40-\176' |
		grep -A1 "^# $v:" | sed -n 's/^# multirail: //p')
	[ -n "$help" ] || { echo "FAIL: $v has no help line"; rc=1; }
	grep -q "\`$v\`" "$src/README.md" || { echo "FAIL: $v not in README.md"; rc=1; }
	grep -q "^\.B $v\$" "$src/man/fi_multirail.7" ||
		{ echo "FAIL: $v not in man/fi_multirail.7"; rc=1; }
	[ $rc = 0 ] && echo "ok $v"
done
exit $rc
