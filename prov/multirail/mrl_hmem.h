/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The few CUDA runtime calls multirail needs to place GPU memory, loaded
 * with dlopen at first use so that the provider runs without CUDA.
 *
 * FI_MULTIRAIL_GPU_PCI=<bus id>[,<bus id>...] replaces CUDA's device list
 * (device i is the i-th bus id): a topology can then be tested on a host
 * without GPUs.  Functions return 0 or a negative FI_E* code.
 */
#ifndef MRL_HMEM_H
#define MRL_HMEM_H

#include <stddef.h>

/* 1 when libcudart was loaded and sees at least one device. */
int mrl_hmem_cuda_available(void);

/* FI_MULTIRAIL_GPU_PCI's list when set, else CUDA's device count. */
int mrl_hmem_cuda_device_count(int *count);
int mrl_hmem_cuda_pci_bus_id(int dev, char *buf, size_t len);

int mrl_hmem_cuda_current_device(int *dev);

/* -FI_ENODEV for host, managed or unknown memory. */
int mrl_hmem_cuda_ptr_device(const void *ptr, int *dev);

/*
 * len bytes from src to dst, either of them device memory (the direction
 * is CUDA's to find, from the pointers); synchronous.
 */
int mrl_hmem_cuda_copy(void *dst, const void *src, size_t len);

/* FI_MULTIRAIL_GPU=<device index>: -FI_ENOENT unset, -FI_EINVAL bad. */
int mrl_hmem_env_gpu(int *dev);

#endif /* MRL_HMEM_H */
