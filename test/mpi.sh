#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#
# Open MPI over multirail, two ranks on this host (test/mpi_test.c: every
# byte checked), where Open MPI is installed (Debian's openmpi-bin and
# libopenmpi-dev) and uses the libfabric this build is for; skipped
# elsewhere:
#   - pml cm + mtl/ofi (Open MPI's default path over libfabric), osc pt2pt:
#     ping-pong, MPI_Put, MPI_Get, MPI_Fetch_and_op, over 1 and 4 rails,
#     multirail chosen by name (mtl_ofi_provider_include);
#   - pml ob1 + btl/ofi, osc rdma (MPI_Put/Get/Fetch_and_op straight to
#     fi_write/fi_read/fi_atomic): over 4 rails every rail must carry RMA
#     bytes (the provider's INFO line per rail at close);
#   - pml cm + mtl/ofi over 4 rails with FI_MULTIRAIL_MESSAGES=striped:
#     ping-pong (every rail must carry message packets) and a bandwidth
#     run, every byte checked;
#   - FI_PROVIDER="multirail;tcp" (root and a private network namespace
#     with 4 veth rails): mtl/ofi ping-pong.  On libfabric 1.17 that
#     spelling runs over `net` (README), whose osc pt2pt hangs in
#     MPI_Win_fence without multirail too: RMA is not run there.
export FI_PROVIDER_PATH="$(pwd)/.libs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
unset FI_PROVIDER FI_MULTIRAIL_RAILS FI_MULTIRAIL_CORE FI_LOG_LEVEL
src="${srcdir:-.}"

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1
then
	echo "SKIP: no Open MPI here (openmpi-bin, libopenmpi-dev)"
	exit 77
fi
# Open MPI's libfabric must be the one we were built for
pkglib=$(ompi_info --parsable --path pkglibdir 2>/dev/null |
	 sed -n 's/^path:pkglibdir://p')
theirs=$(ldd "$pkglib/mca_mtl_ofi.so" 2>/dev/null |
	 awk '/libfabric\.so/ { print $3 }')
ours=$(ldd ./test/rma_test 2>/dev/null | awk '/libfabric\.so/ { print $3 }')
if [ -z "$theirs" ] || [ -z "$ours" ] ||
   [ "$(readlink -f "$theirs")" != "$(readlink -f "$ours")" ]; then
	echo "SKIP: Open MPI uses ${theirs:-no libfabric}, this build ${ours:-none}"
	exit 77
fi
if ! mpicc -O2 -Wall -o test/mpi_test "$src/test/mpi_test.c"; then
	echo "FAIL: mpicc test/mpi_test.c"
	exit 1
fi

failed=0
# run NAME ARGS...: mpirun -np 2 ARGS; its log in mpi-NAME.log
run() {
	name=$1
	shift
	if timeout 120 mpirun -np 2 "$@" >"mpi-$name.log" 2>&1 &&
	   grep -q '^PASS' "mpi-$name.log"; then
		grep '^ok' "mpi-$name.log" | sed "s/^/$name: /"
		return 0
	fi
	grep -v '^libfabric' "mpi-$name.log" | tail -n 8
	echo "FAIL: $name"
	failed=1
	return 1
}

# every_rail NAME N: the ranks' INFO lines show RMA bytes on rails 0..N-1
every_rail() {
	r=0
	while [ "$r" -lt "$2" ]; do
		if ! grep -q "rail $r ([^)]*): [0-9]* RMA chunks, [1-9][0-9]* bytes" \
		     "mpi-$1.log"; then
			echo "FAIL: $1: rail $r carried no RMA bytes"
			failed=1
		fi
		r=$((r + 1))
	done
	[ "$failed" = 0 ] && echo "$1: every rail carried RMA bytes"
}

# every_rail_packets NAME N: the ranks' INFO lines show message packets on
# rails 0..N-1
every_rail_packets() {
	r=0
	while [ "$r" -lt "$2" ]; do
		if ! grep -q "rail $r ([^)]*): .*; [1-9][0-9]* message packets" \
		     "mpi-$1.log"; then
			echo "FAIL: $1: rail $r carried no message packets"
			failed=1
		fi
		r=$((r + 1))
	done
	[ "$failed" = 0 ] && echo "$1: every rail carried message packets"
}

mtl="--mca pml cm --mca mtl ofi --mca osc pt2pt --mca btl self,vader"
btl="--mca pml ob1 --mca btl self,tcp,ofi --mca osc rdma --mca osc_rdma_btls ofi"
for rails in lo lo,lo,lo,lo; do
	n=$(echo "$rails" | tr ',' '\n' | wc -l)
	echo "== $n rail(s): mtl/ofi, osc pt2pt"
	# shellcheck disable=SC2086
	run "mtl-$n" $mtl --mca mtl_ofi_provider_include multirail \
		-x FI_PROVIDER_PATH -x FI_MULTIRAIL_RAILS="$rails" \
		-x FI_MULTIRAIL_CORE="tcp;ofi_rxm" ./test/mpi_test
	echo "== $n rail(s): btl/ofi, osc rdma"
	# shellcheck disable=SC2086
	run "btl-$n" $btl --mca btl_ofi_provider_include multirail \
		-x FI_PROVIDER_PATH -x FI_MULTIRAIL_RAILS="$rails" \
		-x FI_MULTIRAIL_CORE="tcp;ofi_rxm" -x FI_LOG_LEVEL=info \
		./test/mpi_test put get fop && every_rail "btl-$n" "$n"
done

echo "== 4 rails: mtl/ofi, striped messages"
# shellcheck disable=SC2086
run "mtl-striped" $mtl --mca mtl_ofi_provider_include multirail \
	-x FI_PROVIDER_PATH -x FI_MULTIRAIL_RAILS=lo,lo,lo,lo \
	-x FI_MULTIRAIL_CORE="tcp;ofi_rxm" -x FI_MULTIRAIL_MESSAGES=striped \
	-x FI_LOG_LEVEL=info ./test/mpi_test pingpong &&
	every_rail_packets mtl-striped 4
# shellcheck disable=SC2086
run "mtl-striped-bw" $mtl --mca mtl_ofi_provider_include multirail \
	-x FI_PROVIDER_PATH -x FI_MULTIRAIL_RAILS=lo,lo,lo,lo \
	-x FI_MULTIRAIL_CORE="tcp;ofi_rxm" -x FI_MULTIRAIL_MESSAGES=striped \
	./test/mpi_test bw 64 1048576 8

echo "== FI_PROVIDER=\"multirail;tcp\", 4 veth rails: mtl/ofi ping-pong"
# shellcheck disable=SC2016
if unshare -n true 2>/dev/null; then
	unshare -n sh -c '
		ip link set lo up || exit 1
		for i in 0 1 2 3; do
			ip link add mrlv$i type veth peer name mrlw$i &&
			ip addr add 198.18.21$i.1/24 dev mrlv$i &&
			ip addr add 198.18.21$i.2/24 dev mrlw$i &&
			ip link set mrlv$i up && ip link set mrlw$i up || exit 1
		done
		timeout 120 mpirun -np 2 '"$mtl"' \
			--mca mtl_ofi_provider_exclude shm \
			-x FI_PROVIDER="multirail;tcp" -x FI_PROVIDER_PATH \
			-x FI_MULTIRAIL_RAILS=mrlv0,mrlv1,mrlv2,mrlv3 \
			./test/mpi_test pingpong' >mpi-env.log 2>&1
	if grep -q '^PASS' mpi-env.log; then
		grep '^ok' mpi-env.log | sed 's/^/env: /'
	else
		tail -n 8 mpi-env.log
		echo "FAIL: env"
		failed=1
	fi
else
	echo "SKIP (part): no private network namespace here"
fi

[ "$failed" = 0 ] && echo PASS
exit "$failed"
