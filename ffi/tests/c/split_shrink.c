/*
 * One rank of the C API's split and shrink test, run as N >= 3 processes by
 * `streamcomm-run -n N` (the test runs 4).
 *
 * 1. streamcomm_comm_split() by rank % 2 with key -rank: two communicators
 *    whose ranks are in reverse order of the parent's; each rank checks its
 *    new rank and size, then an all-reduce on both groups at once.
 * 2. A split where the last rank passes STREAMCOMM_SPLIT_NOCOLOR: it gets
 *    NULL, the others a communicator ranked as the parent (equal keys).
 * 3. streamcomm_comm_shrink() of the healthy parent excluding rank 1 (which
 *    does not call it): the others get a communicator of N - 1 ranks,
 *    renumbered in the parent's order, and an all-reduce on it.
 * 4. The parent still works: a host barrier and an all-reduce on it.
 * Every all-reduce sums fresh float data (outputs poisoned beforehand) and
 * is checked element by element against a reference computed in double
 * from the generator every rank shares; the seed is STREAMCOMM_TEST_SEED if
 * set (decimal), else rank 0's choice, broadcast. Every handle is freed.
 * Prints "rank R: OK (seed S)" and exits 0 on success; exits 1 naming the
 * failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "streamcomm.h"
#include "check.h"

/* The float that parent rank `rank` contributes at index i: in [-1, 1). */
static float fvalue(int rank, size_t i, uint64_t salt) {
  uint64_t v = value(rank, i, salt);
  return (float)((double)(v >> 11) / 4503599627370496.0 - 1.0);
}

/* Elements per all-reduce: several slots, so the operation is pipelined. */
#define COUNT ((size_t)100003)

/* Sums every member's data (salt) on c, whose rank j is parent rank
 * members[j], and checks each element against the sum in double. */
static void check_all_reduce(streamcomm_comm_t c, streamcomm_stream_t s, const int *members,
                             int nmembers, uint64_t salt, const char *what) {
  float *send = malloc(COUNT * sizeof(float)), *recv = malloc(COUNT * sizeof(float));
  EXPECT(send != NULL && recv != NULL, "out of memory");
  for (size_t i = 0; i < COUNT; i++) send[i] = fvalue(g_rank, i, salt);
  memset(recv, 0xA5, COUNT * sizeof(float));
  CHECK(streamcomm_all_reduce(send, recv, COUNT, STREAMCOMM_FLOAT32, STREAMCOMM_SUM, c, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < COUNT; i++) {
    double want = 0;
    for (int j = 0; j < nmembers; j++) want += (double)fvalue(members[j], i, salt);
    /* Each float addition rounds by at most 2^-24 of a partial sum <= nmembers. */
    EXPECT(fabs((double)recv[i] - want) <= 1e-6 * nmembers * nmembers,
           "%s: sum [%zu] = %.9g, want %.17g", what, i, (double)recv[i], want);
    EXPECT(send[i] == fvalue(g_rank, i, salt), "%s: sendbuff changed at [%zu]", what, i);
  }
  free(send);
  free(recv);
}

/* Checks that c has `size` ranks and that this rank is `rank` there. */
static void check_place(streamcomm_comm_t c, int rank, int size, const char *what) {
  int got_rank = -1, got_size = -1;
  CHECK(streamcomm_comm_rank(c, &got_rank));
  CHECK(streamcomm_comm_size(c, &got_size));
  EXPECT(got_rank == rank && got_size == size, "%s: rank %d of %d, want %d of %d", what,
         got_rank, got_size, rank, size);
}

static void test_split(streamcomm_comm_t world, streamcomm_stream_t s, int n) {
  /* By parity, in reverse order: group c holds the parent ranks of parity c,
   * highest first (key -rank sorts them so). */
  const int color = g_rank % 2;
  streamcomm_comm_t half = NULL;
  CHECK(streamcomm_comm_split(world, color, -g_rank, &half));
  EXPECT(half != NULL && half != world, "a colour gave no communicator");
  int members[64], size = 0;
  for (int r = n - 1; r >= 0; r--)
    if (r % 2 == color) members[size++] = r;
  int want_rank = (n - 1 - g_rank) / 2; /* members of my parity above me */
  EXPECT(members[want_rank] == g_rank, "reference order: rank %d at %d", members[want_rank],
         want_rank);
  check_place(half, want_rank, size, "split by parity");
  check_all_reduce(half, s, members, size, 100 + (uint64_t)color, "split by parity");

  /* The last rank joins no group; equal keys keep the parent's order. */
  const int last = n - 1;
  streamcomm_comm_t rest = (streamcomm_comm_t)(uintptr_t)0x1234;
  CHECK(streamcomm_comm_split(world, g_rank == last ? STREAMCOMM_SPLIT_NOCOLOR : 7, 0, &rest));
  if (g_rank == last) {
    EXPECT(rest == NULL, "STREAMCOMM_SPLIT_NOCOLOR gave a communicator");
  } else {
    EXPECT(rest != NULL, "colour 7 gave no communicator");
    for (int r = 0; r < last; r++) members[r] = r;
    check_place(rest, g_rank, last, "split without the last rank");
    check_all_reduce(rest, s, members, last, 200, "split without the last rank");
    CHECK(streamcomm_comm_destroy(rest));
  }
  /* The first child, still working after its sibling is gone. */
  for (int r = n - 1, k = 0; r >= 0; r--)
    if (r % 2 == color) members[k++] = r;
  check_all_reduce(half, s, members, size, 150 + (uint64_t)color, "split by parity, again");
  CHECK(streamcomm_comm_destroy(half));
}

static void test_shrink(streamcomm_comm_t world, streamcomm_stream_t s, int n) {
  const int excluded[1] = {1};
  if (g_rank == excluded[0]) return; /* excluded ranks do not call shrink */
  streamcomm_comm_t shrunk = NULL;
  CHECK(streamcomm_comm_shrink(world, excluded, 1, &shrunk));
  EXPECT(shrunk != NULL && shrunk != world, "shrink gave no communicator");
  int members[64], size = 0;
  for (int r = 0; r < n; r++)
    if (r != excluded[0]) members[size++] = r;
  check_place(shrunk, g_rank < excluded[0] ? g_rank : g_rank - 1, n - 1, "shrink excluding 1");
  check_all_reduce(shrunk, s, members, size, 300, "shrink excluding 1");
  CHECK(streamcomm_comm_destroy(shrunk));
}

int main(void) {
  streamcomm_comm_t world;
  CHECK(streamcomm_comm_init_from_env(&world));
  int n = 0;
  CHECK(streamcomm_comm_rank(world, &g_rank));
  CHECK(streamcomm_comm_size(world, &n));
  EXPECT(n >= 3 && n <= 64, "run with 3 to 64 ranks, not %d", n);
  streamcomm_stream_t s;
  CHECK(streamcomm_stream_create(&s));

  /* The seed: STREAMCOMM_TEST_SEED, or rank 0's choice; rank 0's, broadcast. */
  if (g_rank == 0) {
    const char *env = getenv("STREAMCOMM_TEST_SEED");
    g_seed = env ? strtoull(env, NULL, 10)
                 : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock();
    fprintf(stderr, "STREAMCOMM_TEST_SEED=%llu (split_shrink.c)\n", (unsigned long long)g_seed);
  }
  CHECK(streamcomm_broadcast(&g_seed, &g_seed, 1, STREAMCOMM_UINT64, 0, world, s));
  CHECK(streamcomm_stream_synchronize(s));

  test_split(world, s, n);
  test_shrink(world, s, n);

  /* The parent is untouched by its children and the shrink. */
  CHECK(streamcomm_barrier_host(world));
  int all[64];
  for (int r = 0; r < n; r++) all[r] = r;
  check_all_reduce(world, s, all, n, 400, "parent after split and shrink");
  streamcomm_result_t async = STREAMCOMM_INTERNAL_ERROR;
  CHECK(streamcomm_comm_get_async_error(world, &async));
  EXPECT(async == STREAMCOMM_SUCCESS, "async error %d", (int)async);

  CHECK(streamcomm_stream_destroy(s));
  CHECK(streamcomm_comm_destroy(world));
  printf("rank %d: OK (seed %llu)\n", g_rank, (unsigned long long)g_seed);
  return 0;
}
