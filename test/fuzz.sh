#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Fuzz the address and control-message parsers (test/fuzz_proto.c) with
# clang's libFuzzer for MRL_FUZZ_SECONDS (default 30), from the seeds in
# test/fuzz/seeds.hex.  Skipped (77) where clang cannot build a fuzzer.
src=${srcdir:-.}
work=$(mktemp -d /tmp/mrl-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
if ! clang -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -I"$src/prov/multirail" \
	"$src/test/fuzz_proto.c" "$src/prov/multirail/mrl_proto.c" \
	-o "$work/fuzz_proto" >"$work/build.log" 2>&1; then
	cat "$work/build.log"
	echo "SKIP: clang with libFuzzer not available"
	exit 77
fi
mkdir "$work/corpus"
n=0
grep -v '^#' "$src/test/fuzz/seeds.hex" | while read -r line; do
	n=$((n + 1))
	printf '%s' "$line" | tr -d ' ' |
		perl -ne 'print pack("H*", $_)' >"$work/corpus/seed$n"
done
ls "$work/corpus" | grep -q seed || { echo "FAIL: no seeds"; exit 1; }
cd "$work" || exit 1
./fuzz_proto -max_total_time="${MRL_FUZZ_SECONDS:-30}" -rss_limit_mb=1024 \
	-max_len=4096 -print_final_stats=1 corpus >fuzz.log 2>&1
rc=$?
grep -E "^(stat::number_of_executed_runs|stat::new_units_added)" fuzz.log
if [ $rc != 0 ]; then
	tail -n 40 fuzz.log
	echo "FAIL: the fuzzer found a crash (rc $rc)"
	exit 1
fi
echo PASS
