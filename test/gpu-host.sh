#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The whole GPU set on a CUDA host with no package registry and no libtool
# (the device machine, docs/gpu.md), from this checkout, in one command:
#   1. libfabric 2.x with CUDA (shm's CUDA IPC path) and its fabtests with
#      --with-cuda, from an already autogen'ed source tarball;
#   2. multirail against it, its own tests skipped (CI runs them);
#   3. fabtests-ext/scripts/fi_multirail_gpu: stock fi_rma_bw and our
#      fi_multirail_bw with -D cuda over shm and multirail, checked and
#      timed, over multirail;efa (the test provider, built here), then
#      fi_multirail_topo;
#   4. with --aws-ofi-nccl and --nccl-tests (2 GPUs):
#      fabtests-ext/scripts/fi_multirail_nccl, NCCL through aws-ofi-nccl
#      over multirail and over the core alone (--only nccl: that alone).
# The tree must already hold configure (./autogen.sh where libtool is).
#   usage: test/gpu-host.sh --libfabric-tarball F [--hwloc-tgz F] [--out DIR]
#          [--reps N] [--only check,perf,topo,bw,efa,nccl] [--ops OPS]
#          [--sizes BYTES]   (--ops, --sizes: fi_multirail_gpu's)
#          [--aws-ofi-nccl F --nccl-tests F [--mpi-include-tgz F]
#           [--nccl-args "ARGS"]]   (fi_multirail_nccl's)
# --hwloc-tgz: Debian's libhwloc-dev files (headers, hwloc.pc), used where
# the host has libhwloc.so.15 but no headers; --mpi-include-tgz: Open MPI's
# include/ folder, where the host has its mpirun and libmpi but no mpi.h.
set -uo pipefail
TARBALL= HWLOC= OUT=${OUT:-/tmp/mrl-gpu-out} REPS=3 ONLY= OPS= SIZES=
AON= NT= MPITGZ= NCCL_ARGS=
while [ $# -gt 0 ]; do
	case $1 in
	--libfabric-tarball) TARBALL=$2; shift 2 ;;
	--hwloc-tgz) HWLOC=$2; shift 2 ;;
	--aws-ofi-nccl) AON=$2; shift 2 ;;
	--nccl-tests) NT=$2; shift 2 ;;
	--mpi-include-tgz) MPITGZ=$2; shift 2 ;;
	--nccl-args) NCCL_ARGS=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--ops) OPS=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	*) echo "usage: $0 --libfabric-tarball F [--hwloc-tgz F] [--out DIR]" \
		"[--reps N] [--only check,perf,topo,bw,efa,nccl]" \
		"[--aws-ofi-nccl F --nccl-tests F]" >&2; exit 2 ;;
	esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=$(nproc)
work=/tmp/mrl-gpu-build
lf=$work/libfabric
mkdir -p "$OUT" "$work"
[ -f "$TARBALL" ] || { echo "gpu-host: no libfabric tarball '$TARBALL'"; exit 2; }
[ -f "$cuda/include/cuda_runtime_api.h" ] || {
	echo "gpu-host: no CUDA toolkit in $cuda: skipped"; exit 0; }

step() { echo "== $* ($(date +%T))"; }

if [ -n "$HWLOC" ] && ! pkg-config --exists hwloc 2>/dev/null; then
	step "hwloc headers from $HWLOC"
	mkdir -p "$work/hw"
	tar xzf "$HWLOC" -C "$work/hw"
	libdir=$work/hw/usr/lib/x86_64-linux-gnu
	so=$(ldconfig -p | awk '/libhwloc\.so\.15 .*x86-64/ { print $NF; exit }')
	[ -n "$so" ] || { echo "gpu-host: no libhwloc.so.15 on this host"; exit 1; }
	ln -sf "$so" "$libdir/libhwloc.so"
	sed -i -e "s|^prefix=.*|prefix=$work/hw/usr|" \
		-e 's|^Cflags: .*|Cflags: -I${includedir} -I${includedir}/x86_64-linux-gnu|' \
		"$libdir/pkgconfig/hwloc.pc"
	export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fi

if [ ! -x "$lf/bin/fi_rma_bw" ]; then
	step "libfabric with CUDA into $lf"
	rm -rf "$work/src" && mkdir -p "$work/src"
	tar xJf "$TARBALL" -C "$work/src" --strip-components=1
	(cd "$work/src" &&
	 ./configure --prefix="$lf" --disable-static --enable-only \
		--enable-shm --enable-tcp --enable-rxm \
		--with-cuda="$cuda" --enable-cuda-dlopen &&
	 make -j"$jobs" && make install &&
	 cd fabtests && ./configure --prefix="$lf" --with-libfabric="$lf" \
		--with-cuda="$cuda" && make -j"$jobs" && make install) \
		>"$OUT/build-libfabric.log" 2>&1 ||
		{ tail -n 30 "$OUT/build-libfabric.log"; exit 1; }
fi
"$lf/bin/fi_info" --version | head -n 2

step "multirail against it"
# A copied tree's timestamps may make automake's outputs look stale.
(cd "$src" && touch aclocal.m4 && sleep 1 &&
 touch configure config.h.in Makefile.in)
rm -rf "$work/mrl" && mkdir -p "$work/mrl"
(cd "$work/mrl" && "$src/configure" --with-libfabric="$lf" \
	--with-cuda="$cuda" && make -j"$jobs" &&
 make -j"$jobs" fabtests-ext/fi_multirail_topo fabtests-ext/fi_multirail_bw \
	test/libefa-fi.la test/opt_test) \
	>"$OUT/build-multirail.log" 2>&1 ||
	{ tail -n 30 "$OUT/build-multirail.log"; exit 1; }
nvidia-smi -L

gpu_only=$(echo "$ONLY" | tr ',' '\n' | grep -v '^nccl$' | paste -sd, -)
rc=0
if [ -z "$ONLY" ] || [ -n "$gpu_only" ]; then
	"$src/fabtests-ext/scripts/fi_multirail_gpu" --bin "$lf/bin" \
		--build "$work/mrl" --libfabric-lib "$lf/lib" --reps "$REPS" \
		${gpu_only:+--only "$gpu_only"} ${OPS:+--ops "$OPS"} \
		${SIZES:+--sizes "$SIZES"} 2>&1 | tee "$OUT/gpu.log" || rc=1
fi
if [ -n "$AON" ] && [ -n "$NT" ] &&
   { [ -z "$ONLY" ] || echo ",$ONLY," | grep -q ',nccl,'; }; then
	mpi_inc=
	if [ -n "$MPITGZ" ]; then
		mkdir -p "$work/mpi-inc"
		tar xzf "$MPITGZ" -C "$work/mpi-inc"
		mpi_inc=$work/mpi-inc/include
	fi
	# shellcheck disable=SC2086
	"$src/fabtests-ext/scripts/fi_multirail_nccl" --libfabric "$lf" \
		--build "$work/mrl" --aws-ofi-nccl "$AON" --nccl-tests "$NT" \
		${mpi_inc:+--mpi-include "$mpi_inc"} --out "$OUT" $NCCL_ARGS \
		2>&1 | tee "$OUT/nccl.log" || rc=1
fi
exit $rc
