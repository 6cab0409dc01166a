/*
 * One rank of the C API test, run as N processes by `streamcomm-run -n N`.
 *
 * Joins the communicator from the launcher's environment, then checks, with
 * fresh random data and outputs poisoned beforehand, every element of:
 * all_reduce (f64 sum, i32 sum, f32 max, in place), broadcast, reduce,
 * all_gather (also in place), reduce_scatter (also in place), all_to_all,
 * send/recv around a ring, grouped send/recv (sends first, to both
 * neighbours and to itself), gather, scatter, all_to_allv, all_gatherv, a stream barrier and a host barrier (by
 * timestamps), events and callbacks; finally rank 0 aborts and the others
 * see their next all-reduce fail promptly, and the async error. References are computed here, in
 * double or exact integers, from the generator every rank shares.
 * Prints "rank R: OK" and exits 0 on success; exits 1 naming the failure.
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

/* A double in [-1, 1). */
static double dvalue(int rank, size_t i, uint64_t salt) {
  return (double)(value(rank, i, salt) >> 11) / 4503599627370496.0 - 1.0;
}
/* A small integer in [-1000, 1000] (sums of any rank count stay exact). */
static int64_t ivalue(int rank, size_t i, uint64_t salt) {
  return (int64_t)(value(rank, i, salt) % 2001) - 1000;
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  EXPECT(p != NULL, "out of memory for %zu bytes", bytes);
  return p;
}
static void poison(void *p, size_t bytes) { memset(p, 0xA5, bytes); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Stream callbacks used by the barrier check. */
struct stamp {
  double sleep_s;
  double at;
};
static int sleep_then_stamp(void *arg) {
  struct stamp *s = arg;
  struct timespec d = {(time_t)s->sleep_s, (long)((s->sleep_s - (time_t)s->sleep_s) * 1e9)};
  nanosleep(&d, NULL);
  s->at = now_s();
  return 0;
}
static int stamp_now(void *arg) {
  ((struct stamp *)arg)->at = now_s();
  return 0;
}

static void test_all_reduce(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  /* f64 sum, several slots long (pipelined), tolerance for summation order. */
  const size_t count = 200003;
  double *send = xmalloc(count * sizeof(double)), *recv = xmalloc(count * sizeof(double));
  for (size_t i = 0; i < count; i++) send[i] = dvalue(g_rank, i, 1);
  poison(recv, count * sizeof(double));
  CHECK(streamcomm_all_reduce(send, recv, count, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < count; i++) {
    double want = 0;
    for (int r = 0; r < n; r++) want += dvalue(r, i, 1);
    EXPECT(fabs(recv[i] - want) <= 1e-12 * n, "f64 sum [%zu] = %.17g, want %.17g", i, recv[i],
           want);
    EXPECT(send[i] == dvalue(g_rank, i, 1), "sendbuff changed at [%zu]", i);
  }
  /* i32 sum in place: exact. */
  const size_t icount = 1009;
  int32_t *buf = xmalloc(icount * sizeof(int32_t));
  for (size_t i = 0; i < icount; i++) buf[i] = (int32_t)ivalue(g_rank, i, 2);
  CHECK(streamcomm_all_reduce(buf, buf, icount, STREAMCOMM_INT32, STREAMCOMM_SUM, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < icount; i++) {
    int64_t want = 0;
    for (int r = 0; r < n; r++) want += ivalue(r, i, 2);
    EXPECT(buf[i] == want, "i32 sum in place [%zu] = %d, want %lld", i, buf[i], (long long)want);
  }
  /* f32 max: exact. */
  float *fs = xmalloc(icount * sizeof(float)), *fr = xmalloc(icount * sizeof(float));
  for (size_t i = 0; i < icount; i++) fs[i] = (float)dvalue(g_rank, i, 3);
  poison(fr, icount * sizeof(float));
  CHECK(streamcomm_all_reduce(fs, fr, icount, STREAMCOMM_FLOAT32, STREAMCOMM_MAX, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < icount; i++) {
    float want = (float)dvalue(0, i, 3);
    for (int r = 1; r < n; r++) {
      float v = (float)dvalue(r, i, 3);
      if (v > want) want = v;
    }
    EXPECT(fr[i] == want, "f32 max [%zu] = %g, want %g", i, fr[i], want);
  }
  free(send), free(recv), free(buf), free(fs), free(fr);
}

static void test_rooted(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  const size_t count = 4099;
  const int root = n - 1;
  int64_t *send = xmalloc(count * 8), *recv = xmalloc(count * 8);
  /* broadcast: only the root's sendbuff is read; others pass NULL. */
  for (size_t i = 0; i < count; i++) send[i] = (int64_t)value(g_rank, i, 4);
  poison(recv, count * 8);
  CHECK(streamcomm_broadcast(g_rank == root ? send : NULL, recv, count, STREAMCOMM_INT64, root,
                             comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < count; i++)
    EXPECT(recv[i] == (int64_t)value(root, i, 4), "broadcast [%zu]", i);
  /* reduce (i64 sum) to rank 0: only its recvbuff is written. */
  for (size_t i = 0; i < count; i++) send[i] = ivalue(g_rank, i, 5);
  poison(recv, count * 8);
  CHECK(streamcomm_reduce(send, g_rank == 0 ? recv : NULL, count, STREAMCOMM_INT64,
                          STREAMCOMM_SUM, 0, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  if (g_rank == 0) {
    for (size_t i = 0; i < count; i++) {
      int64_t want = 0;
      for (int r = 0; r < n; r++) want += ivalue(r, i, 5);
      EXPECT(recv[i] == want, "reduce [%zu] = %lld, want %lld", i, (long long)recv[i],
             (long long)want);
    }
  }
  free(send), free(recv);
}

static void test_gather_scatter(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  const size_t count = 1031, total = count * (size_t)n;
  uint32_t *send = xmalloc(total * 4), *recv = xmalloc(total * 4);
  /* all_gather, then in place (own block at rank * count). */
  for (size_t i = 0; i < count; i++) send[i] = (uint32_t)value(g_rank, i, 6);
  for (int pass = 0; pass < 2; pass++) {
    poison(recv, total * 4);
    const void *src = send;
    if (pass == 1) {
      memcpy(recv + (size_t)g_rank * count, send, count * 4);
      src = recv + (size_t)g_rank * count;
    }
    CHECK(streamcomm_all_gather(src, recv, count, STREAMCOMM_UINT32, comm, s));
    CHECK(streamcomm_stream_synchronize(s));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        EXPECT(recv[(size_t)r * count + i] == (uint32_t)value(r, i, 6),
               "all_gather pass %d block %d [%zu]", pass, r, i);
  }
  /* reduce_scatter (u32 sum, wrapping), then in place. */
  uint32_t *out = xmalloc(count * 4);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < total; i++) send[i] = (uint32_t)value(g_rank, i, 7 + (uint64_t)pass);
    poison(out, count * 4);
    uint32_t *dst = pass == 0 ? out : send + (size_t)g_rank * count;
    CHECK(streamcomm_reduce_scatter(send, dst, count, STREAMCOMM_UINT32, STREAMCOMM_SUM, comm, s));
    CHECK(streamcomm_stream_synchronize(s));
    for (size_t i = 0; i < count; i++) {
      uint32_t want = 0;
      for (int r = 0; r < n; r++)
        want += (uint32_t)value(r, (size_t)g_rank * count + i, 7 + (uint64_t)pass);
      EXPECT(dst[i] == want, "reduce_scatter pass %d [%zu] = %u, want %u", pass, i, dst[i], want);
    }
  }
  /* all_to_all: block j of rank r's input holds value(r, j*count + i). */
  for (size_t i = 0; i < total; i++) send[i] = (uint32_t)value(g_rank, i, 9);
  poison(recv, total * 4);
  CHECK(streamcomm_all_to_all(send, recv, count, STREAMCOMM_UINT32, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++)
      EXPECT(recv[(size_t)r * count + i] ==
                 (uint32_t)value(r, (size_t)g_rank * count + i, 9),
             "all_to_all block %d [%zu]", r, i);
  free(send), free(recv), free(out);
}

static void test_send_recv(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  /* Around the ring; even ranks send first, odd ranks receive first, so one
   * stream per rank cannot deadlock whatever the message size. (A single
   * rank would send to itself, which needs a group: see test_groups.) */
  if (n == 1) return;
  const size_t count = 300007;
  const int next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  uint64_t *send = xmalloc(count * 8), *recv = xmalloc(count * 8);
  for (size_t i = 0; i < count; i++) send[i] = value(g_rank, i, 10);
  poison(recv, count * 8);
  if (g_rank % 2 == 0) {
    CHECK(streamcomm_send(send, count, STREAMCOMM_UINT64, next, comm, s));
    CHECK(streamcomm_recv(recv, count, STREAMCOMM_UINT64, prev, comm, s));
  } else {
    CHECK(streamcomm_recv(recv, count, STREAMCOMM_UINT64, prev, comm, s));
    CHECK(streamcomm_send(send, count, STREAMCOMM_UINT64, next, comm, s));
  }
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < count; i++)
    EXPECT(recv[i] == value(prev, i, 10), "recv from %d [%zu]", prev, i);
  free(send), free(recv);
}

static void test_barriers(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  /* Stream barrier: ranks arrive at different times (callbacks sleep); no
   * rank's work after the barrier may start before the last arrival. */
  struct stamp arrive = {0.02 * (double)(n - 1 - g_rank), 0}, leave = {0, 0};
  CHECK(streamcomm_stream_enqueue_callback(s, sleep_then_stamp, &arrive));
  CHECK(streamcomm_barrier(comm, s));
  CHECK(streamcomm_stream_enqueue_callback(s, stamp_now, &leave));
  streamcomm_event_t ev;
  CHECK(streamcomm_event_create(&ev));
  CHECK(streamcomm_event_record(ev, s));
  CHECK(streamcomm_event_synchronize(ev));
  int done = 0;
  CHECK(streamcomm_event_query(ev, &done));
  EXPECT(done == 1, "event not complete after event_synchronize");
  CHECK(streamcomm_event_destroy(ev));
  double *arrivals = xmalloc((size_t)n * sizeof(double));
  CHECK(streamcomm_all_gather(&arrive.at, arrivals, 1, STREAMCOMM_FLOAT64, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (int r = 0; r < n; r++)
    EXPECT(leave.at >= arrivals[r], "left the stream barrier at %.6f before rank %d arrived at %.6f",
           leave.at, r, arrivals[r]);
  /* Host barrier: the same check on the calling thread. */
  struct timespec d = {0, (long)(20000000L * (n - 1 - g_rank))};
  nanosleep(&d, NULL);
  double host_arrive = now_s();
  CHECK(streamcomm_barrier_host(comm));
  double host_leave = now_s();
  CHECK(streamcomm_all_gather(&host_arrive, arrivals, 1, STREAMCOMM_FLOAT64, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (int r = 0; r < n; r++)
    EXPECT(host_leave >= arrivals[r], "left the host barrier before rank %d arrived", r);
  free(arrivals);
}

/* Elements rank `from` sends to rank `to` in all_to_allv (0 for some pairs). */
static size_t vcount(int from, int to) { return (size_t)((from + 2 * to) % 5) * 97; }

static void test_rooted_p2p(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  const size_t count = 1031, total = count * (size_t)n;
  const int groot = n - 1, sroot = 1 % n;
  int32_t *mine = xmalloc(total * 4), *all = xmalloc(total * 4);
  /* gather to the last rank; other ranks pass NULL as recvbuff. */
  for (size_t i = 0; i < count; i++) mine[i] = (int32_t)value(g_rank, i, 30);
  poison(all, total * 4);
  CHECK(streamcomm_gather(mine, g_rank == groot ? all : NULL, count, STREAMCOMM_INT32, groot,
                          comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  if (g_rank == groot)
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        EXPECT(all[(size_t)r * count + i] == (int32_t)value(r, i, 30), "gather block %d [%zu]", r,
               i);
  /* scatter from rank 1; other ranks pass NULL as sendbuff. */
  for (size_t i = 0; i < total; i++) all[i] = (int32_t)value(g_rank, i, 31);
  poison(mine, count * 4);
  CHECK(streamcomm_scatter(g_rank == sroot ? all : NULL, mine, count, STREAMCOMM_INT32, sroot,
                           comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  for (size_t i = 0; i < count; i++)
    EXPECT(mine[i] == (int32_t)value(sroot, (size_t)g_rank * count + i, 31), "scatter [%zu]", i);
  free(mine), free(all);

  /* all_to_allv with uneven (some empty) regions and gaps between them. */
  size_t *sc = xmalloc((size_t)n * sizeof(size_t)), *sd = xmalloc((size_t)n * sizeof(size_t));
  size_t *rc = xmalloc((size_t)n * sizeof(size_t)), *rd = xmalloc((size_t)n * sizeof(size_t));
  size_t send_len = 0, recv_len = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = vcount(g_rank, j), sd[j] = send_len + 1, send_len += sc[j] + 1;
    rc[j] = vcount(j, g_rank), rd[j] = recv_len + 2, recv_len += rc[j] + 2;
  }
  uint64_t *sv = xmalloc(send_len * 8), *rv = xmalloc(recv_len * 8);
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < sc[j]; i++) sv[sd[j] + i] = value(g_rank, (size_t)j * 100000 + i, 32);
  poison(rv, recv_len * 8);
  CHECK(streamcomm_all_to_allv(sv, sc, sd, rv, rc, rd, STREAMCOMM_UINT64, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  uint64_t poisoned;
  memset(&poisoned, 0xA5, sizeof poisoned);
  for (int j = 0; j < n; j++) {
    for (size_t i = 0; i < rc[j]; i++)
      EXPECT(rv[rd[j] + i] == value(j, (size_t)g_rank * 100000 + i, 32),
             "all_to_allv from %d [%zu]", j, i);
    EXPECT(rv[rd[j] - 1] == poisoned && rv[rd[j] - 2] == poisoned,
           "all_to_allv wrote into the gap before rank %d's region", j);
  }
  free(sc), free(sd), free(rc), free(rd), free(sv), free(rv);

  /* all_gatherv: rank j gives vcount(j, 0) elements (some ranks none),
   * blocks in reverse rank order with a gap of 3 before each. */
  size_t *gc = xmalloc((size_t)n * sizeof(size_t)), *gd = xmalloc((size_t)n * sizeof(size_t));
  size_t glen = 0;
  for (int j = n - 1; j >= 0; j--) gc[j] = vcount(j, 0), gd[j] = glen + 3, glen += gc[j] + 3;
  double *gs = xmalloc(gc[g_rank] * 8), *gr = xmalloc(glen * 8);
  for (size_t i = 0; i < gc[g_rank]; i++) gs[i] = dvalue(g_rank, i, 33);
  poison(gr, glen * 8);
  CHECK(streamcomm_all_gatherv(gs, gc[g_rank], gr, gc, gd, STREAMCOMM_FLOAT64, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  double dpoison;
  memset(&dpoison, 0xA5, sizeof dpoison);
  for (int j = 0; j < n; j++) {
    for (size_t i = 0; i < gc[j]; i++)
      EXPECT(gr[gd[j] + i] == dvalue(j, i, 33), "all_gatherv block %d [%zu]", j, i);
    for (size_t i = 1; i <= 3; i++)
      EXPECT(memcmp(&gr[gd[j] - i], &dpoison, 8) == 0,
             "all_gatherv wrote into the gap before rank %d's block", j);
  }
  free(gc), free(gd), free(gs), free(gr);
}

static void test_groups(streamcomm_comm_t comm, streamcomm_stream_t s, int n) {
  /* Every rank sends first (right, left and to itself), then receives, all
   * in one group: without the group, large sends would wait for receivers
   * that are themselves sending. Receive buffers are 3 elements longer than
   * the messages: the tail must stay as it was. */
  const size_t count = 200003, cap = count + 3;
  const int next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  const int peers[3] = {next, prev, g_rank};
  uint64_t *send[3], *recv[3];
  for (int k = 0; k < 3; k++) {
    send[k] = xmalloc(count * 8);
    recv[k] = xmalloc(cap * 8);
    for (size_t i = 0; i < count; i++) send[k][i] = value(g_rank, i, 20 + (uint64_t)peers[k]);
    poison(recv[k], cap * 8);
  }
  CHECK(streamcomm_group_start());
  CHECK(streamcomm_group_start()); /* nested: only the outer end submits */
  for (int k = 0; k < 3; k++)
    CHECK(streamcomm_send(send[k], count, STREAMCOMM_UINT64, peers[k], comm, s));
  CHECK(streamcomm_group_end());
  /* recv[0] from prev (who sent to its next = me), recv[1] from next, recv[2] from me. */
  const int from[3] = {prev, next, g_rank};
  for (int k = 0; k < 3; k++)
    CHECK(streamcomm_recv(recv[k], cap, STREAMCOMM_UINT64, from[k], comm, s));
  CHECK(streamcomm_group_end());
  CHECK(streamcomm_stream_synchronize(s));
  uint64_t poisoned;
  memset(&poisoned, 0xA5, sizeof poisoned);
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < count; i++)
      EXPECT(recv[k][i] == value(from[k], i, 20 + (uint64_t)g_rank),
             "group recv %d from rank %d [%zu]", k, from[k], i);
    for (size_t i = count; i < cap; i++)
      EXPECT(recv[k][i] == poisoned, "group recv %d wrote past the message at [%zu]", k, i);
    free(send[k]), free(recv[k]);
  }
}

/* Rank 0 aborts instead of joining an all-reduce: the others' all-reduce
 * fails (at the call or on synchronize, never by timing out) with a peer
 * failure, and the async error reports it. A host barrier first: rank 0
 * leaves it only once every rank has finished all earlier work, so only the
 * barrier itself (still releasing the others) and the all-reduce may fail. */
static void test_abort(streamcomm_comm_t comm, streamcomm_stream_t s) {
  double x[16] = {0}, y[16];
  streamcomm_result_t rc = streamcomm_barrier_host(comm);
  if (g_rank == 0) {
    CHECK(rc);
    CHECK(streamcomm_comm_abort(comm));
    EXPECT(streamcomm_comm_abort(comm) == STREAMCOMM_INVALID_HANDLE, "abort released the handle");
    CHECK(streamcomm_stream_destroy(s));
    return;
  }
  double t = now_s();
  if (rc == STREAMCOMM_SUCCESS)
    rc = streamcomm_all_reduce(x, y, 16, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, comm, s);
  if (rc == STREAMCOMM_SUCCESS) rc = streamcomm_stream_synchronize(s);
  EXPECT(rc == STREAMCOMM_REMOTE_FAILED || rc == STREAMCOMM_ABORTED,
         "all_reduce after rank 0 aborted returned %s: %s", streamcomm_error_string(rc),
         streamcomm_last_error());
  EXPECT(now_s() - t < 10, "the failure took %.1f s to arrive", now_s() - t);
  streamcomm_result_t async = STREAMCOMM_SUCCESS;
  CHECK(streamcomm_comm_get_async_error(comm, &async));
  EXPECT(async == STREAMCOMM_REMOTE_FAILED || async == STREAMCOMM_ABORTED, "async error %d",
         (int)async);
  /* The stream holds the error if the all-reduce failed on it. */
  streamcomm_result_t destroyed = streamcomm_stream_destroy(s);
  EXPECT(destroyed == STREAMCOMM_SUCCESS || destroyed == rc, "stream_destroy returned %d",
         (int)destroyed);
  CHECK(streamcomm_comm_destroy(comm));
}

int main(void) {
  streamcomm_comm_t comm;
  CHECK(streamcomm_comm_init_from_env(&comm));
  int n = 0;
  CHECK(streamcomm_comm_rank(comm, &g_rank));
  CHECK(streamcomm_comm_size(comm, &n));
  const char *want_rank = getenv("RANK"), *want_size = getenv("WORLD_SIZE");
  EXPECT(want_rank && atoi(want_rank) == g_rank, "rank %d, RANK=%s", g_rank, want_rank);
  EXPECT(want_size && atoi(want_size) == n, "size %d, WORLD_SIZE=%s", n, want_size);
  streamcomm_stream_t s;
  CHECK(streamcomm_stream_create(&s));

  /* A fresh seed from rank 0, broadcast in place to all ranks. */
  g_seed = g_rank == 0 ? (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock() : 0;
  CHECK(streamcomm_broadcast(&g_seed, &g_seed, 1, STREAMCOMM_UINT64, 0, comm, s));
  CHECK(streamcomm_stream_synchronize(s));
  EXPECT(g_seed != 0, "the seed was not broadcast");

  test_all_reduce(comm, s, n);
  test_rooted(comm, s, n);
  test_gather_scatter(comm, s, n);
  test_send_recv(comm, s, n);
  test_groups(comm, s, n);
  test_rooted_p2p(comm, s, n);
  test_barriers(comm, s, n);

  streamcomm_result_t async = STREAMCOMM_INTERNAL_ERROR;
  CHECK(streamcomm_comm_get_async_error(comm, &async));
  EXPECT(async == STREAMCOMM_SUCCESS, "async error %d", (int)async);
  test_abort(comm, s);
  printf("rank %d: OK (seed %016llx)\n", g_rank, (unsigned long long)g_seed);
  return 0;
}
