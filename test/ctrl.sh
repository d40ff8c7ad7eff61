#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The control channel against a peer that is not multirail or speaks
# another version (test/ctrl_test.c): every bad message dropped with a
# warning, the receives re-posted, the channel still working after.
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER
export FI_MULTIRAIL_RAILS=lo,lo FI_LOG_LEVEL=warn FI_MULTIRAIL_MAX_LEARNED_PEERS=4 \
	FI_MULTIRAIL_RAIL_TIMEOUT_MS=3000 FI_MULTIRAIL_CONNECT_TIMEOUT_MS=3000
log=ctrl-test.log
timeout 120 ./test/ctrl_test 2>"$log" || { tail -n 20 "$log"; exit 1; }
for why in "another version of multirail's control protocol" \
	   "not a multirail control message" "unknown message type" \
	   "more keys than rails" "shorter than its contents" \
	   "the core's receive failed" \
	   "it claims a known peer's address, and the core says it came from elsewhere"; do
	if ! grep -q "control message dropped: $why" "$log"; then
		echo "FAIL: no warning \"$why\""
		exit 1
	fi
	echo "ok warned: $why"
done
if ! grep -q "learned-peer table full (4, FI_MULTIRAIL_MAX_LEARNED_PEERS): the peer heard from least recently was forgotten" "$log"; then
	echo "FAIL: no warning that a learned peer made room"
	exit 1
fi
echo "ok warned: the learned-peer table full, the least recent forgotten"
if ! grep -q "a control message to a peer this rail is out of service for dropped" "$log"; then
	echo "FAIL: the silent peer's control messages were not dropped"
	exit 1
fi
echo "ok warned: a control message for a rail out of service dropped"
