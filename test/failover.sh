#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Rail failure on the emulated testbed (root and network namespaces; skipped
# elsewhere): verified streams of delivery-complete writes and writedata
# (rma_test -X: every byte checked, every op and CQ data exactly once)
# while rail 3's link flaps, and while rail 2's link is down for 4 s; then
# rounds of plain (transmit-complete) writes each announced by a send
# (rma_test -P: the target checks every byte when the message arrives)
# while the initiator's end of rail 1 goes down for 5 s, and for good, and
# rounds of plain writedata while the initiator's end of rail 0 goes down
# (the kernel's default tcp_retries2: the op must end within seconds), and
# from before the first op; a stream of tagged sends while rail 0's
# initiator end goes down for good.
# The throughput while a rail is down is measured by
# fabtests-ext/scripts/fi_multirail_failover (docs/reliability.md).
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER FI_MULTIRAIL_RAILS
TB="${srcdir:-.}/fabtests-ext/scripts/fi_multirail_testbed"

# make check runs tests side by side: the testbed scripts take turns
exec 9>/tmp/mrl-testbed.lock
flock -w 900 9 2>/dev/null || true
if ip netns list 2>/dev/null | grep -qE '^mrl_(a|b)\b'; then
	echo "SKIP: the emulated testbed is in use (a benchmark running?)"
	exit 77
fi
if ! "$TB" up 4 1000 >testbed-failover.log 2>&1; then
	cat testbed-failover.log
	"$TB" down >/dev/null 2>&1
	echo "SKIP: no emulated testbed here (root, netns and tc tbf needed)"
	exit 77
fi
# a stream whose initiator failed leaves its target waiting: it goes too
trap 'pkill -f "rma_test -N mrl_a,mrl_b" 2>/dev/null; "$TB" down >/dev/null 2>&1' \
	EXIT INT TERM

link() {	# RAIL up|down, both ends
	ip -n mrl_a link set "vA$1" "$2" && ip -n mrl_b link set "vB$1" "$2"
}

# stream OP [-T]: 80 x 16 MiB in the background; a short deadline so that the
# rail is taken out, probed and brought back within the run (a peer that
# has not answered yet is judged by FI_MULTIRAIL_CONNECT_TIMEOUT_MS, not
# by this deadline).
stream() {
	FI_MULTIRAIL_RAIL_TIMEOUT_MS=1000 timeout 300 ./test/rma_test \
		-N mrl_a,mrl_b -o "$1" -S 16777216 -W 8 -X 80 $2 \
		>"failover-$1.log" 2>&1 &
	pid=$!
}

# flowing NAME: wait (20 s at most) for two seconds of the stream's
# traffic, so that the fault comes while data flows on every rail, as each
# case means, however long the two processes take to start.  (A rail lost
# while the others are still in first contact can leave the peer no rail:
# docs/limits.md, "Failures".)
flowing() {
	i=0
	while [ $i -lt 200 ]; do
		awk '$1 == "stream" && $3 > 0 { f++ } END { exit f < 2 }' \
			"failover-$1.log" 2>/dev/null && return 0
		sleep 0.1
		i=$((i + 1))
	done
}

# settled RAIL: wait (10 s at most) until both ends of RAIL, its
# initiator's end just brought up, have their carrier and no tentative
# address.  A veth end whose peer is down has no carrier, and 2.x's tcp
# lists no interface without one: a run started at once after the link
# came up had fi_domain fail with -FI_ENODATA on both sides (over 2.1, when
# another test loaded the machine).
settled() {
	i=0
	while [ $i -lt 100 ]; do
		ip -n mrl_a link show "vA$1" | grep -q LOWER_UP &&
		ip -n mrl_b link show "vB$1" | grep -q LOWER_UP &&
		! ip -n mrl_a addr show dev "vA$1" | grep -q tentative &&
		! ip -n mrl_b addr show dev "vB$1" | grep -q tentative &&
			return 0
		sleep 0.1
		i=$((i + 1))
	done
}

finish() {	# NAME: the stream's verdict
	if wait "$pid" && grep -q '^PASS' "failover-$1.log"; then
		grep '^stream:' "failover-$1.log"
	else
		grep -v '^stream [0-9]' "failover-$1.log" | tail -n 5
		echo "FAIL: $1"
		exit 1
	fi
}

echo "== writedata while rail 3 flaps (2 s down, 1 s up, 3 times)"
stream writedata
flowing writedata
sleep 1
for i in 1 2 3; do
	link 3 down; sleep 2; link 3 up; sleep 1
done
finish writedata

echo "== write with rail 2 down for 4 s (FI_THREAD_DOMAIN: the lean CQ read)"
stream write -T
flowing write
sleep 1
link 2 down; sleep 4; link 2 up
finish write

# Tagged sends on the striped message path (rma_test -X with -o tsend: each
# receive checked when it completes, the j-th holding message j), rail 0's
# initiator end down for good: tcp completed the packets its socket took,
# and the ACK watch finds the dead connection by its socket a deadline
# after the ACK stopped, resets it and sends those messages again on the
# other rails.  No send may wait longer than the deadline plus 5 s.
# Over libfabric 2.x a run of this form stopped for good in CI (1 run in
# 3; docs/limits.md, "Messages"): 1.x only until that is found.
case $(./test/crowd_test -v) in
1.*)
echo "== tagged sends, rail 0's initiator end down for good"
FI_MULTIRAIL_MESSAGES=striped FI_MULTIRAIL_RAIL_TIMEOUT_MS=1000 timeout 300 \
	./test/rma_test -N mrl_a,mrl_b -o tsend -S 8388608 -W 8 -X 6000 \
	>failover-msgs.log 2>&1 &
pid=$!
flowing msgs
ip -n mrl_a link set vA0 down
finish msgs
ip -n mrl_a link set vA0 up
settled 0
grep '^msgs:' failover-msgs.log
gap=$(sed -n 's/.*longest wait for a send.s completion \([0-9.]*\) s/\1/p' \
	failover-msgs.log)
if awk -v g="${gap:-99}" 'BEGIN { exit !(g > 6) }'; then
	echo "FAIL: a send waited ${gap:-?} s for its completion (bound: 6 s)"
	exit 1
fi
;;
esac

# rounds NAME COUNT [OP]: rounds of 4 plain 16 MiB writes and a send (or
# of 4 writedata), in the background; under way once the log shows round 3
# (A start whose fi_domain finds no interface is started again, up to 3
# times, 3, 6 and 9 s later: over 2.1, in CI, a run started after a link
# came back up failed -FI_ENODATA though settled() saw both ends up, in
# one process or both, and once on two starts 3 s apart.)
rounds() {
	for try in 1 2 3 4; do
		FI_MULTIRAIL_RAIL_TIMEOUT_MS=${deadline_ms:-1000} timeout 300 \
			./test/rma_test -N mrl_a,mrl_b -o "${3:-write}" \
			-S 16777216 -W 4 -P "$2" >"failover-$1.log" 2>&1 &
		pid=$!
		i=0
		while [ $i -lt 100 ] &&
		      ! grep -q '^round 3 ' "failover-$1.log" 2>/dev/null; do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
			i=$((i + 1))
		done
		# a start that died: judge it once both processes have
		# said why (the target may report after the initiator left)
		if ! grep -q '^round 3 ' "failover-$1.log" &&
		   ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			sleep 1
		fi
		grep -q 'FAIL: fi_domain(.*-61' "failover-$1.log" || return 0
		wait "$pid"
		cp "failover-$1.log" "failover-$1.try$try.log"
		echo "note: $1: fi_domain found no interface at the start" \
			"(try $try); again in $((try * 3)) s"
		sleep $((try * 3))
	done
}

# after NAME: rounds whose send went after the fault (the ops after a loss
# go on over the rails left)
after() {
	awk -v t="$fault" '$1 == "round" && $3 > t && $5 == "sent"' \
		"failover-$1.log" | wc -l
}

# down_for_good NAME RAIL: the initiator's end of RAIL's link goes down
# under the rounds NAME started and stays down until they end; at least 10
# rounds must have been sent after the fault (the ops after a loss go on
# over the rails left)
down_for_good() {
	fault=$(date +%s.%N)
	ip -n mrl_a link set "vA$2" down
	finish "$1"
	ip -n mrl_a link set "vA$2" up
	settled "$2"
	grep -E '^rounds:' "failover-$1.log"
	if [ "$(after "$1")" -lt 10 ]; then
		echo "FAIL: fewer than 10 rounds sent after rail $2 went down"
		exit 1
	fi
}

# One end of a link down (a NIC or cable failing on one host): completed
# writes may sit in that rail's socket.  The send after them must not
# arrive before their bytes: it waits for the rail's flush, or fails with
# -FI_EIO when the flush cannot answer within the deadline.
echo "== plain writes and a send, rail 1's initiator end down for 5 s"
rounds plain-5s 60
fault=$(date +%s.%N)
ip -n mrl_a link set vA1 down; sleep 5; ip -n mrl_a link set vA1 up
settled 1
finish plain-5s
grep -E '^rounds:' "failover-plain-5s.log"

# The link fails just after round 5's writes completed, their bytes still
# in rail 1's socket, and comes back after round 15's: tcp then delivers
# round 5's bytes over round 15's.  Every send from the loss until rail 1
# answers again must fail (the target checks the bytes of every message
# that arrives); the rounds after that must go.
echo "== plain writes and a send, rail 1 down from round 5's send to round 15's"
export MRL_ROUND_FAULT='5:ip link set vA1 down
15:ip link set vA1 up; sleep 6'
rounds plain-stale 30
unset MRL_ROUND_FAULT
finish plain-stale
grep -E '^rounds:' "failover-plain-stale.log"
if ! grep -q '^round 5 .* send-failed$' "failover-plain-stale.log" ||
   [ "$(awk '$1 == "round" && $2 > 20 && $5 == "sent"' \
	"failover-plain-stale.log" | wc -l)" -lt 9 ]; then
	echo "FAIL: round 5's send did not fail, or rounds 21-29 were not all sent"
	exit 1
fi

echo "== plain writes and a send, rail 1's initiator end down for good"
# The kernel's default tcp_retries2 (15): tcp would hold the stuck chunks
# for many minutes.  A deadline after the rail went out, multirail resets
# that connection, so the round under the fault ends within about two
# deadlines (1 s each here), and later rounds go on over 3 rails.
for ns in mrl_a mrl_b; do
	ip netns exec $ns sysctl -qw net.ipv4.tcp_retries2=15
done
rounds plain-down 60
down_for_good plain-down 1
slowest=$(awk '$1 == "round" && $4 > s { s = $4 } END { print s + 0 }' \
	"failover-plain-down.log")
if awk -v s="$slowest" 'BEGIN { exit !(s > 6) }'; then
	echo "FAIL: a round's writes took $slowest s (bound: 6 s)"
	exit 1
fi

# Rail 0 (where a writedata's CQ data goes) down for good under rounds of
# transmit-complete writedata: a WRITE_DATA that went into its socket is
# lost with the connection's reset.  The target checks each op's bytes at
# its CQ data; a round whose writedata all completed and whose data did
# not all come must be followed by a failed op before any data arrives
# (a writedata moved to another rail waits for the flushes behind the
# earlier ones, and the reset reports their loss at once).
# The provider's default deadline (3 s): at 1 s the WRITE_DATAs of the
# round under the fault went after rail 0 was out, and none was lost.
# Twice: without the wait and the report at the reset, about half the
# runs of this form failed ("round 4's data never came, and round 5
# reported no loss"), and 6 of 7 of 40 rounds (fi_multirail_failover).
deadline_ms=3000
for run in 1 2; do
	echo "== plain writedata, rail 0's initiator end down for good ($run)"
	rounds wd-rail0 20 writedata
	down_for_good wd-rail0 0
done

# Rail 0's initiator end down before the first op: the first writedata
# is refused on rail 0 (the link is down) as it is posted, and the rail
# goes out while the op is still being handed to the engine.  It must go
# to the rails left, not stay on rail 0 (it did in 1 of 4 runs of this
# form: "round 0: writes not completed in 120 s"; test/stripe_test's
# test_rail_out_at_first_post is the deterministic form).
echo "== plain writedata, rail 0's initiator end down from the start"
ip -n mrl_a link set vA0 down
rounds wd-rail0-start 10 writedata
finish wd-rail0-start
ip -n mrl_a link set vA0 up
settled 0
grep -E '^rounds:' "failover-wd-rail0-start.log"
if ! grep -q '^rounds: 10 of 4 ops each, [0-9]* bytes: 10 sent' \
	"failover-wd-rail0-start.log"; then
	echo "FAIL: not every round sent and checked with rail 0 down"
	exit 1
fi
unset deadline_ms
