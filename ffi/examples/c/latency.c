/*
 * What the C API costs on top of the library: run as ranks, e.g.
 *
 *   cc -O2 -I ffi/include ffi/examples/c/latency.c -L target/release \
 *      -Wl,-rpath,$PWD/target/release -lstreamcomm_ffi -o /tmp/latency
 *   target/release/streamcomm-run -n 2 -- /tmp/latency
 *
 * Rank 0 prints: the time of one cheap call (streamcomm_comm_rank: the guard
 * plus a handle lookup), of one callback enqueued and synchronized on a host
 * stream, and p50/p99 of an 8-element float all-reduce + synchronize, and of
 * a host barrier, over ITERS calls each.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "streamcomm.h"

#define ITERS 20000

#define CHECK(call)                                                                       \
  do {                                                                                    \
    streamcomm_result_t rc_ = (call);                                                     \
    if (rc_ != STREAMCOMM_SUCCESS) {                                                      \
      fprintf(stderr, "%s: %s\n", #call, streamcomm_last_error());                        \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int nothing(void *arg) {
  (void)arg;
  return 0;
}

static double samples[ITERS];

static void report(int rank, const char *what) {
  qsort(samples, ITERS, sizeof(double), cmp);
  if (rank == 0)
    printf("%-36s p50 %8.2f us   p99 %8.2f us\n", what, samples[ITERS / 2],
           samples[ITERS * 99 / 100]);
}

int main(void) {
  streamcomm_comm_t comm;
  streamcomm_stream_t s;
  int rank, r;
  CHECK(streamcomm_comm_init_from_env(&comm));
  CHECK(streamcomm_comm_rank(comm, &rank));
  CHECK(streamcomm_stream_create(&s));

  double t0 = now_us();
  for (int i = 0; i < ITERS * 10; i++) CHECK(streamcomm_comm_rank(comm, &r));
  if (rank == 0)
    printf("%-36s %8.1f ns per call\n", "streamcomm_comm_rank",
           (now_us() - t0) * 1e3 / (ITERS * 10));

  for (int i = 0; i < ITERS; i++) {
    double t = now_us();
    CHECK(streamcomm_stream_enqueue_callback(s, nothing, NULL));
    CHECK(streamcomm_stream_synchronize(s));
    samples[i] = now_us() - t;
  }
  report(rank, "callback + synchronize");

  float send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
  for (int i = 0; i < ITERS; i++) {
    double t = now_us();
    CHECK(streamcomm_all_reduce(send, recv, 8, STREAMCOMM_FLOAT32, STREAMCOMM_SUM, comm, s));
    CHECK(streamcomm_stream_synchronize(s));
    samples[i] = now_us() - t;
  }
  report(rank, "all_reduce 8 x f32 + synchronize");

  for (int i = 0; i < ITERS; i++) {
    double t = now_us();
    CHECK(streamcomm_barrier_host(comm));
    samples[i] = now_us() - t;
  }
  report(rank, "barrier_host");

  CHECK(streamcomm_stream_destroy(s));
  CHECK(streamcomm_comm_destroy(comm));
  return 0;
}
