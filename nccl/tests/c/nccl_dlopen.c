/* What engines do: open libnccl.so.2 by name with dlopen, resolve every
 * function of nccl.h with dlsym, and use it (a one-rank communicator's
 * all-reduce here). Prints the number of symbols resolved and OK. */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

/* Every function nccl.h declares; NAMES_FILE lists them one a line. */
int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAMES_FILE\n", argv[0]);
    return 2;
  }
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen(libnccl.so.2): %s\n", dlerror());
    return 1;
  }
  FILE *names = fopen(argv[1], "r");
  if (!names) {
    perror(argv[1]);
    return 2;
  }
  char name[256];
  int resolved = 0, missing = 0;
  while (fscanf(names, "%255s", name) == 1) {
    if (dlsym(lib, name)) {
      resolved++;
    } else {
      fprintf(stderr, "dlsym(%s): missing\n", name);
      missing++;
    }
  }
  fclose(names);
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_id)(ncclUniqueId *);
  ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*destroy)(ncclComm_t);
  const char *(*error_string)(ncclResult_t);
  *(void **)&get_version = dlsym(lib, "ncclGetVersion");
  *(void **)&get_id = dlsym(lib, "ncclGetUniqueId");
  *(void **)&init_rank = dlsym(lib, "ncclCommInitRank");
  *(void **)&all_reduce = dlsym(lib, "ncclAllReduce");
  *(void **)&destroy = dlsym(lib, "ncclCommDestroy");
  *(void **)&error_string = dlsym(lib, "ncclGetErrorString");
  if (missing || !get_version || !get_id || !init_rank || !all_reduce || !destroy || !error_string) {
    fprintf(stderr, "%d of the header's functions missing\n", missing);
    return 1;
  }
  int version = 0;
  if (get_version(&version) != ncclSuccess || version != NCCL_VERSION_CODE) {
    fprintf(stderr, "ncclGetVersion: %d\n", version);
    return 1;
  }
  if (strlen(error_string(ncclTimeout)) == 0) return 1;
  driver_open(0);
  cudaStream_t stream;
  CU(cu.cuStreamCreate(&stream, 0));
  ncclUniqueId id;
  ncclComm_t comm;
  if (get_id(&id) != ncclSuccess || init_rank(&comm, 1, id, 0) != ncclSuccess) {
    fprintf(stderr, "one-rank communicator failed\n");
    return 1;
  }
  float host[5] = {1, -2, 3.5f, 4, 5}, back[5] = {0};
  CUdeviceptr in, out;
  CU(cu.cuMemAlloc(&in, sizeof host));
  CU(cu.cuMemAlloc(&out, sizeof host));
  CU(cu.cuMemcpyHtoD(in, host, sizeof host));
  if (all_reduce((void *)in, (void *)out, 5, ncclFloat, ncclSum, comm, stream) != ncclSuccess) return 1;
  CU(cu.cuStreamSynchronize(stream));
  CU(cu.cuMemcpyDtoH(back, out, sizeof back));
  if (memcmp(host, back, sizeof host) != 0) {
    fprintf(stderr, "a one-rank all-reduce changed the data\n");
    return 1;
  }
  if (destroy(comm) != ncclSuccess) return 1;
  printf("%d symbols resolved; OK\n", resolved);
  return 0;
}
