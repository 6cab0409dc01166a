/* The few CUDA driver calls the tests make, loaded with dlopen from
 * libcuda.so.1 (the stand-in, or NVIDIA's driver), so that the tests need
 * no CUDA header or library at build time. Written as NCCL's user guide
 * uses the runtime API, with the driver's equivalents. */
#ifndef TEST_DRIVER_H
#define TEST_DRIVER_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuStreamCreate)(cudaStream_t *, unsigned);
  CUresult (*cuStreamSynchronize)(cudaStream_t);
  CUresult (*cuStreamQuery)(cudaStream_t);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
} cu;

#define CU(call)                                                          \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    if (r_ != 0) {                                                        \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__,      \
              #call, r_);                                                 \
      exit(2);                                                            \
    }                                                                     \
  } while (0)

static void *sym(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "libcuda.so.1 has no %s\n", name);
    exit(2);
  }
  return f;
}

/* Makes device `ordinal`'s primary context current on this thread. */
static void use_device(int ordinal) {
  CUdevice dev;
  CUcontext ctx;
  CU(cu.cuDeviceGet(&dev, ordinal));
  CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cu.cuCtxSetCurrent(ctx));
}

/* Loads the driver and makes device `ordinal` current on this thread. */
static void driver_open(int ordinal) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "no CUDA driver: %s\n", dlerror());
    exit(2);
  }
  *(void **)&cu.cuInit = sym(lib, "cuInit");
  *(void **)&cu.cuDeviceGet = sym(lib, "cuDeviceGet");
  *(void **)&cu.cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
  *(void **)&cu.cuStreamCreate = sym(lib, "cuStreamCreate");
  *(void **)&cu.cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
  *(void **)&cu.cuStreamQuery = sym(lib, "cuStreamQuery");
  *(void **)&cu.cuMemAlloc = sym(lib, "cuMemAlloc_v2");
  *(void **)&cu.cuMemFree = sym(lib, "cuMemFree_v2");
  *(void **)&cu.cuMemcpyHtoD = sym(lib, "cuMemcpyHtoD_v2");
  *(void **)&cu.cuMemcpyDtoH = sym(lib, "cuMemcpyDtoH_v2");
  CU(cu.cuInit(0));
  use_device(ordinal);
}

#endif
