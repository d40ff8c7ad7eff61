#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The GPU set (docs/gpu.md) from make check: on a host with a CUDA device
# and stock fabtests built --with-cuda (MRL_GPU_FABTESTS_BIN, their
# libfabric's lib in MRL_GPU_LIBFABRIC_LIB), fi_multirail_gpu's correctness
# parts (stock fi_rma_bw and fi_multirail_bw with -D cuda over shm,
# shm;multirail and multirail;efa, every byte checked).  Elsewhere, CI among
# them, it says why and skips.
if ! command -v nvidia-smi >/dev/null 2>&1 ||
   ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
	echo "gpu: no CUDA device here: skipped"
	exit 77
fi
if [ -z "$MRL_GPU_FABTESTS_BIN" ]; then
	echo "gpu: a CUDA device, but MRL_GPU_FABTESTS_BIN (stock fabtests" \
		"built --with-cuda) is not set: skipped"
	exit 77
fi
exec sh "${srcdir:-.}/fabtests-ext/scripts/fi_multirail_gpu" \
	--bin "$MRL_GPU_FABTESTS_BIN" --build . \
	${MRL_GPU_LIBFABRIC_LIB:+--libfabric-lib "$MRL_GPU_LIBFABRIC_LIB"} \
	--only check,bw,efa --reps 1
