/* The usage patterns of NCCL's user guide on libnccl.so.2. One device per
 * process: the id made on rank 0 and handed to the others over a socket,
 * ncclCommInitRank, collectives and point-to-point on a stream, groups,
 * split, non-blocking init, bad arguments. One process with several
 * devices: ncclCommInitAll, and a group of all-reduces issued from one
 * thread. Every element of every result is checked against a reference
 * computed in double on the host, outputs poisoned first.
 *
 * usage: nccl_ranks MODE PORT SEED   (RANK and WORLD_SIZE from the launcher)
 *   MODE all:     every call, checked; rank 0 serves the id on PORT
 *   MODE kill:    rank 1 kills itself in the middle of a run of
 *                 all-reduces; the others must get an error from
 *                 ncclCommGetAsyncError, then ncclCommAbort must return
 *   MODE initall: one process, ncclCommInitAll over every device */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"

#define COUNT 1031
#define POISON 77

static int rank, nranks, failures;
static unsigned long seed;
static cudaStream_t stream;

#define NCCL(call)                                                           \
  do {                                                                       \
    ncclResult_t r_ = (call);                                                \
    if (r_ != ncclSuccess) {                                                 \
      fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s): %s\n", rank,     \
              __FILE__, __LINE__, #call, r_, ncclGetErrorString(r_),         \
              ncclGetLastError(NULL));                                       \
      exit(3);                                                               \
    }                                                                        \
  } while (0)

static void pause_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Inputs: integers in -8..8 (or -2..2 for products), exact in every type. */
static double value(int r, size_t i, int small) {
  unsigned long x = seed * 2654435761ul + (unsigned long)r * 7919ul + i * 104729ul;
  x ^= x >> 13;
  return small ? (double)(x % 5) - 2.0 : (double)(x % 17) - 8.0;
}

typedef struct {
  ncclDataType_t type;
  const char *name;
  size_t size;
  int is_int;
} Type;

static const Type TYPES[] = {
    {ncclFloat32, "float32", 4, 0},
    {ncclFloat64, "float64", 8, 0},
    {ncclInt32, "int32", 4, 1},
    {ncclInt8, "int8", 1, 1},
};

static void store(const Type *t, void *p, size_t i, double v) {
  switch (t->type) {
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    case ncclFloat64: ((double *)p)[i] = v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((int8_t *)p)[i] = (int8_t)v; break;
  }
}

static double load(const Type *t, const void *p, size_t i) {
  switch (t->type) {
    case ncclFloat32: return ((const float *)p)[i];
    case ncclFloat64: return ((const double *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    default: return ((const int8_t *)p)[i];
  }
}

/* The value `v` as the type holds it (integers truncate, floats round). */
static double as_type(const Type *t, double v) {
  char b[8];
  store(t, b, 0, v);
  return load(t, b, 0);
}

/* Device buffer of n elements holding f(i) (or POISON). */
static CUdeviceptr upload(const Type *t, size_t n, double (*f)(size_t, void *), void *arg) {
  CUdeviceptr d;
  char *h = malloc(n * t->size + 1);
  for (size_t i = 0; i < n; i++) store(t, h, i, f ? f(i, arg) : POISON);
  CU(cu.cuMemAlloc(&d, n * t->size + 1));
  CU(cu.cuMemcpyHtoD(d, h, n * t->size));
  free(h);
  return d;
}

static void check(const Type *t, const char *what, CUdeviceptr d, size_t n,
                  double (*want)(size_t, void *), void *arg) {
  char *h = malloc(n * t->size + 1);
  CU(cu.cuStreamSynchronize(stream));
  CU(cu.cuMemcpyDtoH(h, d, n * t->size));
  int shown = 0;
  for (size_t i = 0; i < n; i++) {
    double g = load(t, h, i), w = as_type(t, want(i, arg));
    if (g != w) {
      if (shown++ < 4)
        fprintf(stderr, "rank %d: %s %s [%zu]: got %g, want %g\n", rank, t->name, what, i, g, w);
      failures++;
    }
  }
  free(h);
}

/* Generators and references, through a small context. */
typedef struct {
  int small, root, block;
  ncclRedOp_t op;
} Ctx;

static double mine(size_t i, void *a) { return value(rank, i, ((Ctx *)a)->small); }
static double reduced(size_t i, void *a) {
  Ctx *c = a;
  double acc = value(0, i, c->small);
  for (int r = 1; r < nranks; r++) {
    double v = value(r, i, c->small);
    switch (c->op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  return c->op == ncclAvg ? acc / nranks : acc;
}
static double of_root(size_t i, void *a) { return value(((Ctx *)a)->root, i, 0); }
static double gathered(size_t i, void *a) {
  int b = ((Ctx *)a)->block;
  return value((int)(i / b), i % b, 0);
}
/* Rank r's input for all-to-all: block p goes to rank p. */
static double a2a_in(size_t i, void *a) {
  int b = ((Ctx *)a)->block;
  return value(rank, i, 0) + 100.0 * (double)(i / b == (size_t)rank);
}
static double a2a_out(size_t i, void *a) {
  int b = ((Ctx *)a)->block;
  size_t from = i / b, j = rank * b + i % b;
  return value((int)from, j, 0) + 100.0 * (double)(rank == (int)from);
}
static double left_in(size_t i, void *a) {
  (void)a;
  return value((rank + nranks - 1) % nranks, i, 0);
}
static double scattered(size_t i, void *a) {
  Ctx *c = a;
  return value(c->root, rank * c->block + i, 0);
}
static double reduced_block(size_t i, void *a) {
  Ctx *c = a;
  return reduced(rank * c->block + i, a);
}

static void every_call(ncclComm_t comm, const Type *t) {
  static const ncclRedOp_t OPS[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  size_t n = COUNT, s = t->size;
  for (int k = 0; k < 5; k++) {
    Ctx c = {OPS[k] == ncclProd, 0, 0, OPS[k]};
    CUdeviceptr in = upload(t, n, mine, &c), out = upload(t, n, NULL, NULL);
    NCCL(ncclAllReduce((void *)in, (void *)out, n, t->type, OPS[k], comm, stream));
    check(t, "all-reduce", out, n, reduced, &c);
    NCCL(ncclAllReduce((void *)in, (void *)in, n, t->type, OPS[k], comm, stream));
    check(t, "all-reduce in place", in, n, reduced, &c);
    CU(cu.cuMemFree(in));
    CU(cu.cuMemFree(out));
  }
  Ctx c = {0, nranks - 1, 0, ncclSum};
  CUdeviceptr in = upload(t, n, mine, &c), out = upload(t, n, NULL, NULL);
  NCCL(ncclBroadcast((void *)in, (void *)out, n, t->type, c.root, comm, stream));
  check(t, "broadcast", out, n, of_root, &c);
  c.root = 0;
  CUdeviceptr b = upload(t, n, mine, &c);
  NCCL(ncclBcast((void *)b, n, t->type, 0, comm, stream));
  check(t, "bcast", b, n, of_root, &c);
  c.root = 1 % nranks;
  CUdeviceptr r = upload(t, n, NULL, NULL);
  NCCL(ncclReduce((void *)in, (void *)r, n, t->type, ncclSum, c.root, comm, stream));
  if (rank == c.root) check(t, "reduce", r, n, reduced, &c);
  CU(cu.cuMemFree(b));
  CU(cu.cuMemFree(r));

  c.block = n;
  CUdeviceptr all = upload(t, n * nranks, NULL, NULL);
  NCCL(ncclAllGather((void *)in, (void *)all, n, t->type, comm, stream));
  check(t, "all-gather", all, n * nranks, gathered, &c);
  CUdeviceptr all2 = upload(t, n * nranks, NULL, NULL);
  {
    char *h = malloc(n * s);
    for (size_t i = 0; i < n; i++) store(t, h, i, value(rank, i, 0));
    CU(cu.cuMemcpyHtoD(all2 + rank * n * s, h, n * s));
    free(h);
  }
  NCCL(ncclAllGather((void *)(all2 + rank * n * s), (void *)all2, n, t->type, comm, stream));
  check(t, "all-gather in place", all2, n * nranks, gathered, &c);

  /* Reduce-scatter over n * nranks elements: block r to rank r. */
  c.block = n;
  CUdeviceptr big = upload(t, n * nranks, mine, &c), mine_out = upload(t, n, NULL, NULL);
  NCCL(ncclReduceScatter((void *)big, (void *)mine_out, n, t->type, ncclSum, comm, stream));
  check(t, "reduce-scatter", mine_out, n, reduced_block, &c);
  NCCL(ncclReduceScatter((void *)big, (void *)(big + rank * n * s), n, t->type, ncclSum, comm, stream));
  CU(cu.cuStreamSynchronize(stream));
  check(t, "reduce-scatter in place", big + rank * n * s, n, reduced_block, &c);

  /* All-to-all, gather, scatter with blocks of n elements. */
  CUdeviceptr a2a = upload(t, n * nranks, a2a_in, &c), a2b = upload(t, n * nranks, NULL, NULL);
  NCCL(ncclAlltoAll((void *)a2a, (void *)a2b, n, t->type, comm, stream));
  check(t, "all-to-all", a2b, n * nranks, a2a_out, &c);
  c.root = nranks - 1;
  CUdeviceptr g = upload(t, n * nranks, NULL, NULL);
  NCCL(ncclGather((void *)in, (void *)g, n, t->type, c.root, comm, stream));
  if (rank == c.root) check(t, "gather", g, n * nranks, gathered, &c);
  c.root = 0;
  CUdeviceptr sc = upload(t, n * nranks, NULL, NULL), sin = upload(t, n * nranks, NULL, NULL);
  {
    char *h = malloc(n * nranks * s);
    for (size_t i = 0; i < n * nranks; i++) store(t, h, i, value(0, i, 0));
    if (rank == 0) CU(cu.cuMemcpyHtoD(sin, h, n * nranks * s));
    free(h);
  }
  NCCL(ncclScatter((void *)sin, (void *)sc, n, t->type, 0, comm, stream));
  check(t, "scatter", sc, n, scattered, &c);

  /* A ring of sends and receives, every rank sending first: a group. */
  CUdeviceptr ring = upload(t, n, NULL, NULL);
  NCCL(ncclGroupStart());
  NCCL(ncclSend((void *)in, n, t->type, (rank + 1) % nranks, comm, stream));
  NCCL(ncclRecv((void *)ring, n, t->type, (rank + nranks - 1) % nranks, comm, stream));
  NCCL(ncclGroupEnd());
  check(t, "send/recv ring", ring, n, left_in, &c);

  CUdeviceptr bufs[] = {in, out, all, all2, big, mine_out, a2a, a2b, g, sc, sin, ring};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) CU(cu.cuMemFree(bufs[k]));
}

static void expect(ncclResult_t got, ncclResult_t want, const char *what, const char *mention) {
  const char *last = ncclGetLastError(NULL);
  if (got != want || (mention && !strstr(last, mention))) {
    fprintf(stderr, "rank %d: %s returned %d (want %d), last error \"%s\" (should mention \"%s\")\n",
            rank, what, got, want, last, mention ? mention : "");
    failures++;
  }
}

static void bad_arguments(ncclComm_t comm) {
  CUdeviceptr d;
  CU(cu.cuMemAlloc(&d, 64));
  expect(ncclAllReduce((void *)d, (void *)d, 4, ncclFloat, ncclSum, NULL, stream),
         ncclInvalidArgument, "a NULL communicator", "NULL");
  expect(ncclAllReduce((void *)d, (void *)d, 4, (ncclDataType_t)99, ncclSum, comm, stream),
         ncclInvalidArgument, "an unknown datatype", "99");
  expect(ncclAllReduce((void *)d, (void *)d, 4, ncclFloat, (ncclRedOp_t)42, comm, stream),
         ncclInvalidArgument, "an unknown operator", "42");
  expect(ncclAllReduce((void *)d, (void *)d, SIZE_MAX / 2, ncclFloat, ncclSum, comm, stream),
         ncclInvalidArgument, "a count that overflows", "overflows");
  expect(ncclSend((void *)d, 4, ncclFloat, nranks, comm, stream), ncclInvalidArgument,
         "a peer out of range", "not a rank");
  expect(ncclCommDestroy((ncclComm_t)(uintptr_t)0x1234), ncclInvalidArgument,
         "a forged communicator", "not a communicator");
  expect(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without a group", "without");
  ncclComm_t grown = NULL;
  expect(ncclCommGrow(comm, nranks + 1, NULL, 0, &grown, NULL), ncclInvalidUsage,
         "ncclCommGrow", "not supported");
  ncclRedOp_t op;
  float scale = 2.0f;
  expect(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, comm),
         ncclInvalidUsage, "ncclRedOpCreatePreMulSum", "pre-multiplied");
  CU(cu.cuMemFree(d));
}

/* The id from rank 0, over a TCP socket on 127.0.0.1:`port` (`round`
 * tells a later id from an earlier one: the port is port + round). */
static ncclUniqueId shared_id(int port, int round) {
  ncclUniqueId id;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)(port + round));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rank == 0) {
    NCCL(ncclGetUniqueId(&id));
    int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s < 0 || bind(s, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s, 64) != 0) {
      perror("serve the id");
      exit(2);
    }
    for (int served = 1; served < nranks; served++) {
      int c = accept(s, NULL, NULL);
      if (c < 0 || write(c, &id, sizeof id) != (ssize_t)sizeof id) {
        perror("send the id");
        exit(2);
      }
      close(c);
    }
    close(s);
    return id;
  }
  for (double start = now_ms(); now_ms() - start < 60e3; pause_ms(10)) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) {
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(s, (char *)&id + got, sizeof id - got);
        if (n <= 0) break;
        got += (size_t)n;
      }
      close(s);
      if (got == sizeof id) return id;
    } else {
      close(s);
    }
  }
  fprintf(stderr, "rank %d: no id on port %d after 60 s\n", rank, port + round);
  exit(2);
}

/* ncclCommInitAll over every device of this process, a group of
 * all-reduces issued from this one thread, each checked. */
static int init_all(void) {
  int ndev = 0;
  CUresult (*count)(int *);
  *(void **)&count = dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuDeviceGetCount");
  CU(count(&ndev));
  if (ndev < 2) {
    fprintf(stderr, "initall needs 2 devices or more (the stand-in: STREAMCOMM_STANDIN_DEVICES=2)\n");
    return 1;
  }
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  CUdeviceptr bufs[8];
  ndev = ndev > 8 ? 8 : ndev;
  nranks = ndev;
  NCCL(ncclCommInitAll(comms, ndev, NULL));
  const Type *t = &TYPES[0];
  Ctx c = {0, 0, 0, ncclSum};
  for (int d = 0; d < ndev; d++) {
    int dev = -1, r = -1;
    NCCL(ncclCommCuDevice(comms[d], &dev));
    NCCL(ncclCommUserRank(comms[d], &r));
    if (dev != d || r != d) {
      fprintf(stderr, "comm %d: device %d, rank %d\n", d, dev, r);
      return 1;
    }
    use_device(d);
    CU(cu.cuStreamCreate(&streams[d], 0));
    rank = d;
    bufs[d] = upload(t, COUNT, mine, &c);
  }
  NCCL(ncclGroupStart());
  for (int d = 0; d < ndev; d++)
    NCCL(ncclAllReduce((void *)bufs[d], (void *)bufs[d], COUNT, t->type, ncclSum, comms[d], streams[d]));
  NCCL(ncclGroupEnd());
  for (int d = 0; d < ndev; d++) {
    use_device(d);
    rank = d;
    stream = streams[d];
    check(t, "init-all all-reduce", bufs[d], COUNT, reduced, &c);
    CU(cu.cuMemFree(bufs[d]));
    NCCL(ncclCommDestroy(comms[d]));
  }
  if (failures) return 1;
  printf("init-all over %d devices: OK\n", ndev);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4 || !getenv("RANK") || !getenv("WORLD_SIZE")) {
    fprintf(stderr, "usage: RANK=r WORLD_SIZE=n %s all|kill|initall PORT SEED\n", argv[0]);
    return 2;
  }
  rank = atoi(getenv("RANK"));
  nranks = atoi(getenv("WORLD_SIZE"));
  seed = strtoul(argv[3], NULL, 10);
  int port = atoi(argv[2]);
  driver_open(0);
  if (strcmp(argv[1], "initall") == 0) return init_all();
  CU(cu.cuStreamCreate(&stream, 0));
  int version = 0;
  NCCL(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) {
    fprintf(stderr, "ncclGetVersion: %d, want %d\n", version, NCCL_VERSION_CODE);
    return 1;
  }
  ncclUniqueId id = shared_id(port, 0);
  ncclComm_t comm;
  NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int count = -1, me = -1, dev = -1;
  NCCL(ncclCommCount(comm, &count));
  NCCL(ncclCommUserRank(comm, &me));
  NCCL(ncclCommCuDevice(comm, &dev));
  if (count != nranks || me != rank || dev != 0) {
    fprintf(stderr, "rank %d: count %d, rank %d, device %d\n", rank, count, me, dev);
    return 1;
  }

  if (strcmp(argv[1], "kill") == 0) {
    CUdeviceptr d;
    CU(cu.cuMemAlloc(&d, 4 * COUNT));
    NCCL(ncclAllReduce((void *)d, (void *)d, COUNT, ncclFloat, ncclSum, comm, stream));
    CU(cu.cuStreamSynchronize(stream));
    if (rank == 1) raise(SIGKILL);
    double start = now_ms();
    ncclResult_t state = ncclSuccess;
    for (int k = 0; state == ncclSuccess && now_ms() - start < 120e3; k++) {
      if (ncclAllReduce((void *)d, (void *)d, COUNT, ncclFloat, ncclSum, comm, stream) != ncclSuccess) break;
      while (cu.cuStreamQuery(stream) != 0 && state == ncclSuccess) {
        NCCL(ncclCommGetAsyncError(comm, &state));
        pause_ms(1);
      }
      NCCL(ncclCommGetAsyncError(comm, &state));
    }
    double waited = now_ms() - start;
    if (state == ncclSuccess) {
      fprintf(stderr, "rank %d: no error %g ms after rank 1 died\n", rank, waited);
      return 1;
    }
    double abort_start = now_ms();
    NCCL(ncclCommAbort(comm));
    printf("rank %d: error %d (%s) %.0f ms after rank 1 died: %s; ncclCommAbort returned in %.0f ms\n",
           rank, state, ncclGetErrorString(state), waited, ncclGetLastError(NULL),
           now_ms() - abort_start);
    return 0;
  }

  for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) every_call(comm, &TYPES[k]);
  bad_arguments(comm);

  /* Two halves: even and odd ranks, keyed in reverse. */
  ncclComm_t half;
  NCCL(ncclCommSplit(comm, rank % 2, -rank, &half, NULL));
  int hcount, hrank;
  NCCL(ncclCommCount(half, &hcount));
  NCCL(ncclCommUserRank(half, &hrank));
  int want_count = (nranks + (rank % 2 == 0)) / 2;
  if (hcount != want_count || hrank != (hcount - 1 - rank / 2)) {
    fprintf(stderr, "rank %d: half of %d ranks, rank %d\n", rank, hcount, hrank);
    failures++;
  }
  {
    CUdeviceptr d;
    float h = (float)(rank + 1), got = 0;
    CU(cu.cuMemAlloc(&d, sizeof h));
    CU(cu.cuMemcpyHtoD(d, &h, sizeof h));
    NCCL(ncclAllReduce((void *)d, (void *)d, 1, ncclFloat, ncclSum, half, stream));
    CU(cu.cuStreamSynchronize(stream));
    CU(cu.cuMemcpyDtoH(&got, d, sizeof got));
    float want = 0;
    for (int r = rank % 2; r < nranks; r += 2) want += (float)(r + 1);
    if (got != want) {
      fprintf(stderr, "rank %d: sum over its half %g, want %g\n", rank, got, want);
      failures++;
    }
    CU(cu.cuMemFree(d));
  }
  NCCL(ncclCommDestroy(half));

  /* Memory from ncclMemAlloc, registered, used by an all-reduce. */
  {
    void *m = NULL, *handle = NULL;
    NCCL(ncclMemAlloc(&m, 64 * sizeof(float)));
    NCCL(ncclCommRegister(comm, m, 64 * sizeof(float), &handle));
    float h[64], got[64];
    for (int i = 0; i < 64; i++) h[i] = (float)(rank * 64 + i);
    CU(cu.cuMemcpyHtoD((CUdeviceptr)m, h, sizeof h));
    NCCL(ncclAllReduce(m, m, 64, ncclFloat, ncclMax, comm, stream));
    CU(cu.cuStreamSynchronize(stream));
    CU(cu.cuMemcpyDtoH(got, (CUdeviceptr)m, sizeof got));
    for (int i = 0; i < 64; i++)
      if (got[i] != (float)((nranks - 1) * 64 + i)) {
        fprintf(stderr, "rank %d: ncclMemAlloc buffer [%d]: %g\n", rank, i, got[i]);
        failures++;
        break;
      }
    NCCL(ncclCommDeregister(comm, handle));
    NCCL(ncclMemFree(m));
  }

  /* Shrink: every rank but the last makes a communicator without it. */
  if (nranks > 2) {
    int excluded = nranks - 1;
    if (rank != excluded) {
      ncclComm_t rest;
      NCCL(ncclCommShrink(comm, &excluded, 1, &rest, NULL, 0));
      int rcount, rrank;
      NCCL(ncclCommCount(rest, &rcount));
      NCCL(ncclCommUserRank(rest, &rrank));
      if (rcount != nranks - 1 || rrank != rank) {
        fprintf(stderr, "rank %d: shrunk to %d ranks, rank %d\n", rank, rcount, rrank);
        failures++;
      }
      CUdeviceptr d;
      float h = 1.0f, got = 0;
      CU(cu.cuMemAlloc(&d, sizeof h));
      CU(cu.cuMemcpyHtoD(d, &h, sizeof h));
      NCCL(ncclAllReduce((void *)d, (void *)d, 1, ncclFloat, ncclSum, rest, stream));
      CU(cu.cuStreamSynchronize(stream));
      CU(cu.cuMemcpyDtoH(&got, d, sizeof got));
      if (got != (float)(nranks - 1)) {
        fprintf(stderr, "rank %d: sum over the shrunk communicator %g\n", rank, got);
        failures++;
      }
      CU(cu.cuMemFree(d));
      NCCL(ncclCommDestroy(rest));
    }
  }

  /* Non-blocking initialization, polled. */
  ncclUniqueId id2 = shared_id(port, 1);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nb;
  ncclResult_t r = ncclCommInitRankConfig(&nb, nranks, id2, rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) {
    fprintf(stderr, "rank %d: non-blocking init returned %d\n", rank, r);
    return 1;
  }
  ncclResult_t state = ncclInProgress;
  for (double start = now_ms(); state == ncclInProgress && now_ms() - start < 60e3; pause_ms(1))
    NCCL(ncclCommGetAsyncError(nb, &state));
  if (state != ncclSuccess) {
    fprintf(stderr, "rank %d: non-blocking init ended in %d: %s\n", rank, state, ncclGetLastError(nb));
    return 1;
  }
  NCCL(ncclCommFinalize(nb));
  NCCL(ncclCommDestroy(nb));

  NCCL(ncclCommFinalize(comm));
  NCCL(ncclCommDestroy(comm));
  if (failures) {
    fprintf(stderr, "rank %d: %d failures\n", rank, failures);
    return 1;
  }
  printf("rank %d: OK\n", rank);
  return 0;
}
