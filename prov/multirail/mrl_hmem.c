/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * CUDA runtime through dlopen.  See mrl_hmem.h.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "mrl_hmem.h"

#define CUDA_SUCCESS		0
#define CUDA_MEMORY_DEVICE	2	/* cudaMemoryTypeDevice */
#define CUDA_MEMCPY_DEFAULT	4	/* cudaMemcpyDefault: by the pointers */

/*
 * struct cudaPointerAttributes as of CUDA 11-13.  CUDA 13 appends
 * "long reserved[8]", which it writes: keep room for it.
 */
struct mrl_cuda_ptr_attr {
	int type;
	int device;
	void *devicePointer;
	void *hostPointer;
	long reserved[16];
};

static struct {
	void *lib;
	int (*get_device_count)(int *count);
	int (*get_device)(int *dev);
	int (*get_pci_bus_id)(char *buf, int len, int dev);
	int (*ptr_attrs)(struct mrl_cuda_ptr_attr *attr, const void *ptr);
	int (*get_last_error)(void);
	int (*memcpy)(void *dst, const void *src, size_t len, int kind);
	int ndevices;
} cuda;

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void *mrl_open_cudart(void)
{
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"libcudart.so.11.0",
	};
	void *lib;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (lib)
			return lib;
	}
	return NULL;
}

static int mrl_load_symbols(void)
{
	cuda.get_device_count = dlsym(cuda.lib, "cudaGetDeviceCount");
	cuda.get_device = dlsym(cuda.lib, "cudaGetDevice");
	cuda.get_pci_bus_id = dlsym(cuda.lib, "cudaDeviceGetPCIBusId");
	cuda.ptr_attrs = dlsym(cuda.lib, "cudaPointerGetAttributes");
	cuda.get_last_error = dlsym(cuda.lib, "cudaGetLastError");
	cuda.memcpy = dlsym(cuda.lib, "cudaMemcpy");
	return cuda.get_device_count && cuda.get_device &&
	       cuda.get_pci_bus_id && cuda.ptr_attrs && cuda.get_last_error &&
	       cuda.memcpy;
}

/* Never closed: CUDA may still be in use by the application at exit. */
static void mrl_cuda_load(void)
{
	int n = 0;

	cuda.lib = mrl_open_cudart();
	if (!cuda.lib)
		return;
	if (!mrl_load_symbols() || cuda.get_device_count(&n) != CUDA_SUCCESS ||
	    n <= 0) {
		if (cuda.get_last_error)
			cuda.get_last_error();
		n = 0;
	}
	cuda.ndevices = n;
}

int mrl_hmem_cuda_available(void)
{
	pthread_once(&cuda_once, mrl_cuda_load);
	return cuda.ndevices > 0;
}

/* Returns the n-th entry of FI_MULTIRAIL_GPU_PCI, or how many there are. */
static int mrl_env_gpu_entry(int n, char *buf, size_t len)
{
	const char *list = getenv("FI_MULTIRAIL_GPU_PCI");
	const char *p, *end;
	int i = 0;

	if (!list || !*list)
		return -FI_ENOENT;
	for (p = list; ; p = end + 1, i++) {
		end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		if (i == n) {
			if ((size_t) (end - p) >= len)
				return -FI_ETOOSMALL;
			memcpy(buf, p, end - p);
			buf[end - p] = '\0';
			return 0;
		}
		if (!*end)
			break;
	}
	return n < 0 ? i + 1 : -FI_ENODEV;
}

int mrl_hmem_cuda_device_count(int *count)
{
	int n = mrl_env_gpu_entry(-1, NULL, 0);

	if (n >= 0) {
		*count = n;
		return 0;
	}
	*count = 0;
	if (!mrl_hmem_cuda_available())
		return -FI_ENOSYS;
	*count = cuda.ndevices;
	return 0;
}

int mrl_hmem_cuda_pci_bus_id(int dev, char *buf, size_t len)
{
	int ret;

	if (dev < 0 || !len)
		return -FI_EINVAL;
	ret = mrl_env_gpu_entry(dev, buf, len);
	if (ret != -FI_ENOENT)
		return ret;
	if (!mrl_hmem_cuda_available())
		return -FI_ENOSYS;
	if (dev >= cuda.ndevices)
		return -FI_ENODEV;
	if (cuda.get_pci_bus_id(buf, len > 64 ? 64 : (int) len, dev) !=
	    CUDA_SUCCESS) {
		cuda.get_last_error();
		return -FI_EIO;
	}
	return 0;
}

int mrl_hmem_cuda_current_device(int *dev)
{
	if (!mrl_hmem_cuda_available())
		return -FI_ENOSYS;
	if (cuda.get_device(dev) != CUDA_SUCCESS) {
		cuda.get_last_error();
		return -FI_EIO;
	}
	return 0;
}

int mrl_hmem_cuda_ptr_device(const void *ptr, int *dev)
{
	struct mrl_cuda_ptr_attr attr;

	if (!mrl_hmem_cuda_available())
		return -FI_ENOSYS;
	memset(&attr, 0, sizeof(attr));
	/* Before CUDA 11 a plain host pointer was an error; clear it. */
	if (cuda.ptr_attrs(&attr, ptr) != CUDA_SUCCESS) {
		cuda.get_last_error();
		return -FI_ENODEV;
	}
	if (attr.type != CUDA_MEMORY_DEVICE)
		return -FI_ENODEV;
	*dev = attr.device;
	return 0;
}

int mrl_hmem_cuda_copy(void *dst, const void *src, size_t len)
{
	if (!mrl_hmem_cuda_available())
		return -FI_ENOSYS;
	if (cuda.memcpy(dst, src, len, CUDA_MEMCPY_DEFAULT) != CUDA_SUCCESS) {
		cuda.get_last_error();
		return -FI_EIO;
	}
	return 0;
}

int mrl_hmem_env_gpu(int *dev)
{
	const char *s = getenv("FI_MULTIRAIL_GPU");
	char *end;
	long v;

	if (!s || !*s)
		return -FI_ENOENT;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 4096)
		return -FI_EINVAL;
	*dev = (int) v;
	return 0;
}
