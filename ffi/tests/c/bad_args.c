/*
 * Every entry point of streamcomm.h called with bad arguments: each call must
 * return the result code the header documents, leave a last-error message
 * naming the function, and the process must survive. One process, using a
 * 1-rank communicator where a valid one is needed.
 * Prints "bad_args: N checks OK" and exits 0; exits 1 naming a failure.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streamcomm.h"

static int checks = 0;

/* `call` must return `want`; on failure, the last error names `fn`. */
#define EXPECT_RC(want, fn, call)                                                         \
  do {                                                                                    \
    streamcomm_result_t rc_ = (call);                                                     \
    checks++;                                                                             \
    if (rc_ != (want)) {                                                                  \
      fprintf(stderr, "line %d: %s returned %s (%d), want %s (%d); last error: %s\n",     \
              __LINE__, #call, streamcomm_error_string(rc_), (int)rc_,                   \
              streamcomm_error_string(want), (int)(want), streamcomm_last_error());       \
      exit(1);                                                                            \
    }                                                                                     \
    if ((want) != STREAMCOMM_SUCCESS && strstr(streamcomm_last_error(), fn) == NULL) {    \
      fprintf(stderr, "line %d: last error of %s does not name %s: %s\n", __LINE__,       \
              #call, fn, streamcomm_last_error());                                        \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define OK(call) EXPECT_RC(STREAMCOMM_SUCCESS, "", call)
#define ARG STREAMCOMM_INVALID_ARGUMENT
#define HANDLE STREAMCOMM_INVALID_HANDLE
#define USAGE STREAMCOMM_INVALID_USAGE

#define EXPECT(cond)                                                                      \
  do {                                                                                    \
    checks++;                                                                             \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "line %d: check failed: %s\n", __LINE__, #cond);                    \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static int fail_callback(void *arg) {
  (void)arg;
  return 42;
}

struct nested {
  streamcomm_stream_t stream;
  streamcomm_comm_t comm;
  streamcomm_result_t sync_rc, barrier_rc, destroy_rc;
};
/* Blocking calls from inside a callback are refused, not deadlocked. */
static int blocking_callback(void *arg) {
  struct nested *n = arg;
  n->sync_rc = streamcomm_stream_synchronize(n->stream);
  n->barrier_rc = streamcomm_barrier_host(n->comm);
  n->destroy_rc = streamcomm_stream_destroy(n->stream);
  return 0;
}

static void strings(void) {
  EXPECT(strcmp(streamcomm_error_string(STREAMCOMM_SUCCESS), "success") == 0);
  EXPECT(strcmp(streamcomm_error_string((streamcomm_result_t)-1), "unknown result code") == 0);
  EXPECT(strcmp(streamcomm_error_string((streamcomm_result_t)13), "unknown result code") == 0);
  for (int c = 0; c <= STREAMCOMM_INTERNAL_ERROR; c++)
    EXPECT(strcmp(streamcomm_error_string((streamcomm_result_t)c), "unknown result code") != 0);
  EXPECT(streamcomm_last_error() != NULL);
}

static void unique_ids(streamcomm_unique_id_t *id) {
  char text[STREAMCOMM_UNIQUE_ID_STRING_BYTES];
  streamcomm_unique_id_t zero, back;
  memset(&zero, 0, sizeof zero);
  EXPECT_RC(ARG, "streamcomm_get_unique_id", streamcomm_get_unique_id(NULL));
  OK(streamcomm_get_unique_id(id));
  EXPECT_RC(ARG, "streamcomm_unique_id_to_string", streamcomm_unique_id_to_string(NULL, text, sizeof text));
  EXPECT_RC(ARG, "streamcomm_unique_id_to_string", streamcomm_unique_id_to_string(id, NULL, sizeof text));
  EXPECT_RC(ARG, "streamcomm_unique_id_to_string", streamcomm_unique_id_to_string(id, text, 5));
  EXPECT_RC(ARG, "streamcomm_unique_id_to_string", streamcomm_unique_id_to_string(&zero, text, sizeof text));
  OK(streamcomm_unique_id_to_string(id, text, sizeof text));
  EXPECT_RC(ARG, "streamcomm_unique_id_from_string", streamcomm_unique_id_from_string(NULL, &back));
  EXPECT_RC(ARG, "streamcomm_unique_id_from_string", streamcomm_unique_id_from_string(text, NULL));
  EXPECT_RC(ARG, "streamcomm_unique_id_from_string", streamcomm_unique_id_from_string("127.0.0.1:1/zz", &back));
  EXPECT_RC(ARG, "streamcomm_unique_id_from_string", streamcomm_unique_id_from_string("", &back));
  OK(streamcomm_unique_id_from_string(text, &back));
  EXPECT(memcmp(&back, id, sizeof back) == 0);
}

static void init(const streamcomm_unique_id_t *id, streamcomm_comm_t *comm) {
  streamcomm_unique_id_t zero;
  memset(&zero, 0, sizeof zero);
  streamcomm_comm_t c = (streamcomm_comm_t)(uintptr_t)0x1234;
  const char *fn = "streamcomm_comm_init_rank";
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(NULL, 1, id, 0));
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, 1, NULL, 0));
  EXPECT(c == NULL); /* cleared on failure */
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, 1, &zero, 0));
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, 0, id, 0));
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, -1, id, 0));
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, 1, id, -1));
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank(&c, 2, id, 2));
  char raw[sizeof(void *) * 2];
  EXPECT_RC(ARG, fn, streamcomm_comm_init_rank((streamcomm_comm_t *)(raw + 1), 1, id, 0));
  EXPECT_RC(ARG, "streamcomm_comm_init_from_env", streamcomm_comm_init_from_env(NULL));
  OK(streamcomm_comm_init_rank(comm, 1, id, 0));
  EXPECT(*comm != NULL);
}

static void queries(streamcomm_comm_t comm, streamcomm_stream_t s) {
  int v = -1;
  char raw[16];
  int *misaligned = (int *)(raw + 1);
  streamcomm_result_t r;
  EXPECT_RC(HANDLE, "streamcomm_comm_rank", streamcomm_comm_rank(NULL, &v));
  EXPECT_RC(HANDLE, "streamcomm_comm_rank", streamcomm_comm_rank((streamcomm_comm_t)s, &v));
  EXPECT_RC(HANDLE, "streamcomm_comm_rank", streamcomm_comm_rank((streamcomm_comm_t)(uintptr_t)0x1234, &v));
  EXPECT_RC(ARG, "streamcomm_comm_rank", streamcomm_comm_rank(comm, NULL));
  EXPECT_RC(ARG, "streamcomm_comm_rank", streamcomm_comm_rank(comm, misaligned));
  OK(streamcomm_comm_rank(comm, &v));
  EXPECT(v == 0);
  EXPECT_RC(HANDLE, "streamcomm_comm_size", streamcomm_comm_size(NULL, &v));
  EXPECT_RC(ARG, "streamcomm_comm_size", streamcomm_comm_size(comm, NULL));
  EXPECT_RC(ARG, "streamcomm_comm_size", streamcomm_comm_size(comm, misaligned));
  OK(streamcomm_comm_size(comm, &v));
  EXPECT(v == 1);
  EXPECT_RC(HANDLE, "streamcomm_comm_get_async_error", streamcomm_comm_get_async_error(NULL, &r));
  EXPECT_RC(ARG, "streamcomm_comm_get_async_error", streamcomm_comm_get_async_error(comm, NULL));
  OK(streamcomm_comm_get_async_error(comm, &r));
  EXPECT(r == STREAMCOMM_SUCCESS);
}

static void streams_and_events(streamcomm_comm_t comm, streamcomm_stream_t s) {
  streamcomm_event_t ev;
  int done;
  char raw[sizeof(void *) * 2];
  EXPECT_RC(ARG, "streamcomm_stream_create", streamcomm_stream_create(NULL));
  EXPECT_RC(ARG, "streamcomm_stream_create", streamcomm_stream_create((streamcomm_stream_t *)(raw + 1)));
  EXPECT_RC(HANDLE, "streamcomm_stream_synchronize", streamcomm_stream_synchronize(NULL));
  EXPECT_RC(HANDLE, "streamcomm_stream_synchronize", streamcomm_stream_synchronize((streamcomm_stream_t)comm));
  EXPECT_RC(HANDLE, "streamcomm_stream_destroy", streamcomm_stream_destroy(NULL));
  EXPECT_RC(HANDLE, "streamcomm_stream_enqueue_callback", streamcomm_stream_enqueue_callback(NULL, fail_callback, NULL));
  EXPECT_RC(ARG, "streamcomm_stream_enqueue_callback", streamcomm_stream_enqueue_callback(s, NULL, NULL));
  EXPECT_RC(ARG, "streamcomm_event_create", streamcomm_event_create(NULL));
  OK(streamcomm_event_create(&ev));
  EXPECT_RC(HANDLE, "streamcomm_stream_wait_event", streamcomm_stream_wait_event(NULL, ev));
  EXPECT_RC(HANDLE, "streamcomm_stream_wait_event", streamcomm_stream_wait_event(s, NULL));
  EXPECT_RC(HANDLE, "streamcomm_stream_wait_event", streamcomm_stream_wait_event(s, (streamcomm_event_t)s));
  EXPECT_RC(HANDLE, "streamcomm_event_record", streamcomm_event_record(NULL, s));
  EXPECT_RC(HANDLE, "streamcomm_event_record", streamcomm_event_record(ev, NULL));
  EXPECT_RC(HANDLE, "streamcomm_event_synchronize", streamcomm_event_synchronize(NULL));
  EXPECT_RC(HANDLE, "streamcomm_event_query", streamcomm_event_query(NULL, &done));
  EXPECT_RC(ARG, "streamcomm_event_query", streamcomm_event_query(ev, NULL));
  OK(streamcomm_event_record(ev, s));
  OK(streamcomm_stream_wait_event(s, ev));
  OK(streamcomm_event_synchronize(ev));
  OK(streamcomm_event_destroy(ev));
  EXPECT_RC(HANDLE, "streamcomm_event_destroy", streamcomm_event_destroy(ev));
  EXPECT_RC(HANDLE, "streamcomm_event_query", streamcomm_event_query(ev, &done));

  /* A failing callback fails its stream, stickily; destroy reports it too. */
  streamcomm_stream_t bad;
  OK(streamcomm_stream_create(&bad));
  OK(streamcomm_stream_enqueue_callback(bad, fail_callback, NULL));
  EXPECT_RC(STREAMCOMM_USER_CALLBACK_ERROR, "streamcomm_stream_synchronize", streamcomm_stream_synchronize(bad));
  EXPECT(strstr(streamcomm_last_error(), "42") != NULL);
  EXPECT_RC(STREAMCOMM_USER_CALLBACK_ERROR, "streamcomm_stream_destroy", streamcomm_stream_destroy(bad));
  EXPECT_RC(HANDLE, "streamcomm_stream_synchronize", streamcomm_stream_synchronize(bad));

  /* Blocking calls from a callback return INVALID_USAGE instead of hanging. */
  struct nested n = {s, comm, STREAMCOMM_SUCCESS, STREAMCOMM_SUCCESS, STREAMCOMM_SUCCESS};
  OK(streamcomm_stream_enqueue_callback(s, blocking_callback, &n));
  OK(streamcomm_stream_synchronize(s));
  EXPECT(n.sync_rc == USAGE && n.barrier_rc == USAGE && n.destroy_rc == USAGE);
}

static void collectives(streamcomm_comm_t comm, streamcomm_stream_t s) {
  double buf[8] = {0};
  double *a = buf, *b = buf + 4;
  char *odd = (char *)buf + 1;
  const size_t huge = SIZE_MAX / 2;
  const streamcomm_data_type_t F64 = STREAMCOMM_FLOAT64;
  const char *fn = "streamcomm_all_reduce";
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, b, 4, (streamcomm_data_type_t)10, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, b, 4, (streamcomm_data_type_t)-1, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, b, 4, F64, (streamcomm_reduce_op_t)5, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(NULL, b, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, NULL, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(odd, b, 2, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, a + 1, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_reduce(a, b, huge, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_reduce(a, b, 4, F64, STREAMCOMM_SUM, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_reduce(a, b, 4, F64, STREAMCOMM_SUM, comm, NULL));
  EXPECT_RC(HANDLE, fn, streamcomm_all_reduce(a, b, 4, F64, STREAMCOMM_SUM, comm, (streamcomm_stream_t)comm));
  OK(streamcomm_all_reduce(NULL, NULL, 0, F64, STREAMCOMM_SUM, comm, s)); /* empty is fine */

  fn = "streamcomm_broadcast";
  EXPECT_RC(ARG, fn, streamcomm_broadcast(a, b, 4, (streamcomm_data_type_t)11, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_broadcast(a, b, 4, F64, -1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_broadcast(a, b, 4, F64, 1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_broadcast(a, NULL, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_broadcast(NULL, b, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_broadcast(a, a + 2, 4, F64, 0, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_broadcast(a, b, 4, F64, 0, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_broadcast(a, b, 4, F64, 0, comm, NULL));

  fn = "streamcomm_reduce";
  EXPECT_RC(ARG, fn, streamcomm_reduce(a, b, 4, F64, (streamcomm_reduce_op_t)-3, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(a, b, 4, (streamcomm_data_type_t)99, STREAMCOMM_SUM, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(a, b, 4, F64, STREAMCOMM_SUM, -1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(a, b, 4, F64, STREAMCOMM_SUM, 3, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(NULL, b, 4, F64, STREAMCOMM_SUM, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(a, NULL, 4, F64, STREAMCOMM_SUM, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce(odd, b, 1, F64, STREAMCOMM_SUM, 0, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_reduce(a, b, 4, F64, STREAMCOMM_SUM, 0, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_reduce(a, b, 4, F64, STREAMCOMM_SUM, 0, comm, NULL));

  fn = "streamcomm_all_gather";
  EXPECT_RC(ARG, fn, streamcomm_all_gather(a, b, 4, (streamcomm_data_type_t)10, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gather(NULL, b, 4, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gather(a, NULL, 4, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gather(a + 1, a, 4, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gather(a, odd, 1, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gather(a, b, huge, F64, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_gather(a, b, 4, F64, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_gather(a, b, 4, F64, comm, NULL));

  fn = "streamcomm_reduce_scatter";
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(a, b, 4, F64, (streamcomm_reduce_op_t)7, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(a, b, 4, (streamcomm_data_type_t)12, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(NULL, b, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(a, NULL, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(a, a + 1, 4, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_reduce_scatter(a, b, huge, F64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_reduce_scatter(a, b, 4, F64, STREAMCOMM_SUM, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_reduce_scatter(a, b, 4, F64, STREAMCOMM_SUM, comm, NULL));

  fn = "streamcomm_all_to_all";
  EXPECT_RC(ARG, fn, streamcomm_all_to_all(a, b, 4, (streamcomm_data_type_t)-7, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_all(NULL, b, 4, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_all(a, NULL, 4, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_all(a, a, 4, F64, comm, s)); /* never in place */
  EXPECT_RC(ARG, fn, streamcomm_all_to_all(odd, b, 1, F64, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_to_all(a, b, 4, F64, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_to_all(a, b, 4, F64, comm, NULL));

  fn = "streamcomm_gather";
  EXPECT_RC(ARG, fn, streamcomm_gather(a, b, 4, (streamcomm_data_type_t)10, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_gather(a, b, 4, F64, -1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_gather(a, b, 4, F64, 1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_gather(NULL, b, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_gather(a, NULL, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_gather(a, a, 4, F64, 0, comm, s)); /* never in place */
  EXPECT_RC(ARG, fn, streamcomm_gather(odd, b, 1, F64, 0, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_gather(a, b, 4, F64, 0, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_gather(a, b, 4, F64, 0, comm, NULL));

  fn = "streamcomm_scatter";
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, b, 4, (streamcomm_data_type_t)-2, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, b, 4, F64, -1, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, b, 4, F64, 2, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(NULL, b, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, NULL, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, a + 3, 4, F64, 0, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_scatter(a, odd, 1, F64, 0, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_scatter(a, b, 4, F64, 0, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_scatter(a, b, 4, F64, 0, comm, NULL));

  fn = "streamcomm_all_to_allv";
  size_t four = 4, zero = 0, big = SIZE_MAX;
  char rawsz[2 * sizeof(size_t)];
  const size_t *misaligned_sz = (const size_t *)(rawsz + 1);
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &zero, b, &four, &zero, (streamcomm_data_type_t)10, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, NULL, &zero, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, NULL, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &zero, b, NULL, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &zero, b, &four, NULL, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, misaligned_sz, &zero, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &big, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(NULL, &four, &zero, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &zero, NULL, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(a, &four, &zero, a, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_to_allv(odd, &four, &zero, b, &four, &zero, F64, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_to_allv(a, &four, &zero, b, &four, &zero, F64, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_to_allv(a, &four, &zero, b, &four, &zero, F64, comm, NULL));

  fn = "streamcomm_all_gatherv";
  size_t three = 3;
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, &four, &zero, (streamcomm_data_type_t)10, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, NULL, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, &four, NULL, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, misaligned_sz, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, &four, &big, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, b, &three, &zero, F64, comm, s)); /* != recvcounts[rank] */
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(NULL, 4, b, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, NULL, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(a, 4, a, &four, &zero, F64, comm, s));
  EXPECT_RC(ARG, fn, streamcomm_all_gatherv(odd, 1, b, &four, &zero, F64, comm, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_gatherv(a, 4, b, &four, &zero, F64, NULL, s));
  EXPECT_RC(HANDLE, fn, streamcomm_all_gatherv(a, 4, b, &four, &zero, F64, comm, NULL));

  EXPECT_RC(HANDLE, "streamcomm_barrier", streamcomm_barrier(NULL, s));
  EXPECT_RC(HANDLE, "streamcomm_barrier", streamcomm_barrier(comm, NULL));
  EXPECT_RC(HANDLE, "streamcomm_barrier_host", streamcomm_barrier_host(NULL));
  EXPECT_RC(HANDLE, "streamcomm_barrier_host", streamcomm_barrier_host((streamcomm_comm_t)s));

  /* The valid forms still work on one rank, in place included. */
  for (int i = 0; i < 8; i++) buf[i] = i + 0.5;
  OK(streamcomm_all_reduce(a, b, 4, F64, STREAMCOMM_SUM, comm, s));
  OK(streamcomm_all_reduce(a, a, 4, F64, STREAMCOMM_MAX, comm, s));
  OK(streamcomm_barrier(comm, s));
  OK(streamcomm_stream_synchronize(s));
  OK(streamcomm_barrier_host(comm));
  double g[4] = {0}, v[4] = {0};
  size_t two = 2, one_off = 1;
  OK(streamcomm_gather(a, g, 4, F64, 0, comm, s));
  OK(streamcomm_scatter(g, b, 4, F64, 0, comm, s));
  OK(streamcomm_all_to_allv(a, &two, &one_off, v, &two, &two, F64, comm, s));
  double w[4] = {0};
  OK(streamcomm_all_gatherv(a + 2, 2, w, &two, &one_off, F64, comm, s));
  OK(streamcomm_stream_synchronize(s));
  EXPECT(w[0] == 0 && w[1] == a[2] && w[2] == a[3] && w[3] == 0);
  for (int i = 0; i < 4; i++) EXPECT(g[i] == a[i] && b[i] == a[i]);
  EXPECT(v[0] == 0 && v[1] == 0 && v[2] == a[1] && v[3] == a[2]);
  for (int i = 0; i < 4; i++) EXPECT(b[i] == i + 0.5 && a[i] == i + 0.5);
  /* No error above reached the stream. */
  OK(streamcomm_stream_synchronize(s));
}

static void p2p_and_groups(streamcomm_comm_t comm, streamcomm_stream_t s) {
  int64_t buf[4] = {0};
  const streamcomm_data_type_t I64 = STREAMCOMM_INT64;
  const char *fns[2] = {"streamcomm_send", "streamcomm_recv"};
  for (int k = 0; k < 2; k++) {
#define P2P(ptr, count, dt, peer, c, st)                                                  \
  (k == 0 ? streamcomm_send((ptr), (count), (dt), (peer), (c), (st))                      \
          : streamcomm_recv((ptr), (count), (dt), (peer), (c), (st)))
    EXPECT_RC(ARG, fns[k], P2P(buf, 4, (streamcomm_data_type_t)10, 0, comm, s));
    EXPECT_RC(ARG, fns[k], P2P(buf, 4, I64, -1, comm, s));
    EXPECT_RC(ARG, fns[k], P2P(buf, 4, I64, 0, comm, s)); /* itself */
    EXPECT_RC(ARG, fns[k], P2P(buf, 4, I64, 1, comm, s)); /* out of range */
    EXPECT_RC(HANDLE, fns[k], P2P(buf, 4, I64, 1, NULL, s));
    EXPECT_RC(HANDLE, fns[k], P2P(buf, 4, I64, 1, comm, NULL));
    EXPECT_RC(HANDLE, fns[k], P2P(buf, 4, I64, 1, (streamcomm_comm_t)s, s));
#undef P2P
  }
  EXPECT_RC(ARG, "streamcomm_send", streamcomm_send(NULL, 4, I64, 1, comm, s));
  EXPECT_RC(ARG, "streamcomm_recv", streamcomm_recv((char *)buf + 4, 1, I64, 1, comm, s));

  EXPECT_RC(USAGE, "streamcomm_group_end", streamcomm_group_end());
  OK(streamcomm_group_start());
  OK(streamcomm_group_start());
  EXPECT_RC(USAGE, "streamcomm_all_reduce", streamcomm_all_reduce(buf, buf, 4, I64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(USAGE, "streamcomm_broadcast", streamcomm_broadcast(buf, buf, 4, I64, 0, comm, s));
  EXPECT_RC(USAGE, "streamcomm_reduce", streamcomm_reduce(buf, buf, 4, I64, STREAMCOMM_SUM, 0, comm, s));
  EXPECT_RC(USAGE, "streamcomm_all_gather", streamcomm_all_gather(buf, buf, 4, I64, comm, s));
  EXPECT_RC(USAGE, "streamcomm_reduce_scatter", streamcomm_reduce_scatter(buf, buf, 4, I64, STREAMCOMM_SUM, comm, s));
  EXPECT_RC(USAGE, "streamcomm_all_to_all", streamcomm_all_to_all(buf, buf + 2, 1, I64, comm, s));
  EXPECT_RC(USAGE, "streamcomm_gather", streamcomm_gather(buf, buf + 2, 1, I64, 0, comm, s));
  EXPECT_RC(USAGE, "streamcomm_scatter", streamcomm_scatter(buf, buf + 2, 1, I64, 0, comm, s));
  size_t one = 1, zero = 0;
  EXPECT_RC(USAGE, "streamcomm_all_to_allv", streamcomm_all_to_allv(buf, &one, &zero, buf + 2, &one, &zero, I64, comm, s));
  EXPECT_RC(USAGE, "streamcomm_barrier", streamcomm_barrier(comm, s));
  EXPECT_RC(USAGE, "streamcomm_barrier_host", streamcomm_barrier_host(comm));
  EXPECT_RC(ARG, "streamcomm_send", streamcomm_send(buf, 4, I64, 1, comm, s));
  OK(streamcomm_group_end()); /* inner end: nothing submitted */
  OK(streamcomm_group_end()); /* outer end: nothing was collected */
  EXPECT_RC(USAGE, "streamcomm_group_end", streamcomm_group_end());

  /* A send to this rank alone is refused outside a group, and in a group
   * without its receive; paired with one, it is delivered. */
  int64_t in[4] = {0}, out[4] = {11, -22, 33, -44};
  EXPECT_RC(ARG, "streamcomm_send", streamcomm_send(out, 4, I64, 0, comm, s));
  OK(streamcomm_group_start());
  OK(streamcomm_send(out, 4, I64, 0, comm, s));
  EXPECT_RC(ARG, "streamcomm_group_end", streamcomm_group_end());
  OK(streamcomm_group_start());
  OK(streamcomm_send(out, 4, I64, 0, comm, s));
  OK(streamcomm_recv(in, 4, I64, 0, comm, s));
  OK(streamcomm_group_end());
  OK(streamcomm_stream_synchronize(s));
  for (int i = 0; i < 4; i++) EXPECT(in[i] == out[i]);

  /* A receive overlapping another buffer of its group, a second stream in
   * one group, a stream destroyed before the group's end. */
  streamcomm_stream_t other;
  OK(streamcomm_stream_create(&other));
  OK(streamcomm_group_start());
  OK(streamcomm_send(out, 4, I64, 0, comm, other));
  OK(streamcomm_send(out + 1, 2, I64, 0, comm, other)); /* sends may share memory */
  EXPECT_RC(ARG, "streamcomm_recv", streamcomm_recv(out + 2, 2, I64, 0, comm, other));
  EXPECT_RC(USAGE, "streamcomm_recv", streamcomm_recv(in, 4, I64, 0, comm, s));
  OK(streamcomm_recv(in, 4, I64, 0, comm, other));
  EXPECT_RC(ARG, "streamcomm_recv", streamcomm_recv(in + 3, 1, I64, 0, comm, other));
  OK(streamcomm_stream_destroy(other));
  EXPECT_RC(HANDLE, "streamcomm_group_end", streamcomm_group_end());
  EXPECT_RC(USAGE, "streamcomm_group_end", streamcomm_group_end()); /* that group is over */
}

/* Split and shrink from a stream callback: both blocking, both refused. */
struct regroup {
  streamcomm_comm_t comm, split_out, shrink_out;
  streamcomm_result_t split_rc, shrink_rc;
};
static int regroup_callback(void *arg) {
  struct regroup *g = arg;
  g->split_rc = streamcomm_comm_split(g->comm, 0, 0, &g->split_out);
  g->shrink_rc = streamcomm_comm_shrink(g->comm, NULL, 0, &g->shrink_out);
  return 0;
}

static void split_and_shrink(streamcomm_comm_t comm, streamcomm_stream_t s) {
  streamcomm_comm_t junk = (streamcomm_comm_t)(uintptr_t)0x1234, c = junk;
  char raw[2 * sizeof(void *)];
  streamcomm_comm_t *misaligned = (streamcomm_comm_t *)(raw + 1);
  int v = -1;
  const char *fn = "streamcomm_comm_split";
  EXPECT(STREAMCOMM_SPLIT_NOCOLOR == -1);
  EXPECT_RC(ARG, fn, streamcomm_comm_split(comm, 0, 0, NULL));
  EXPECT_RC(ARG, fn, streamcomm_comm_split(comm, 0, 0, misaligned));
  EXPECT_RC(ARG, fn, streamcomm_comm_split(comm, -2, 0, &c));
  EXPECT(c == NULL); /* *newcomm is NULL on failure */
  c = junk;
  EXPECT_RC(ARG, fn, streamcomm_comm_split(comm, INT_MIN, 0, &c));
  EXPECT(c == NULL);
  c = junk;
  EXPECT_RC(HANDLE, fn, streamcomm_comm_split(NULL, 0, 0, &c));
  EXPECT(c == NULL);
  EXPECT_RC(HANDLE, fn, streamcomm_comm_split((streamcomm_comm_t)s, 0, 0, &c));
  EXPECT_RC(HANDLE, fn, streamcomm_comm_split((streamcomm_comm_t)(uintptr_t)0x1234, 0, 0, &c));

  fn = "streamcomm_comm_shrink";
  int ranks[3] = {0, 0, 0};
  const int *misaligned_ranks = (const int *)((char *)ranks + 1);
  int negative[2] = {0, -1}, out_of_range = 1, self = 0;
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, NULL, 0, NULL));
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, NULL, 0, misaligned));
  c = junk;
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, NULL, 1, &c));
  EXPECT(c == NULL);
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, misaligned_ranks, 1, &c));
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, negative, 2, &c));
  EXPECT(strstr(streamcomm_last_error(), "exclude[1] -1 is negative") != NULL);
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, ranks, SIZE_MAX, &c)); /* never read */
  EXPECT_RC(ARG, fn, streamcomm_comm_shrink(comm, &out_of_range, 1, &c));
  EXPECT_RC(USAGE, fn, streamcomm_comm_shrink(comm, &self, 1, &c)); /* excluded ranks don't call */
  EXPECT(c == NULL);
  EXPECT_RC(HANDLE, fn, streamcomm_comm_shrink(NULL, NULL, 0, &c));
  EXPECT_RC(HANDLE, fn, streamcomm_comm_shrink((streamcomm_comm_t)s, NULL, 0, &c));

  /* Both are refused inside a group, and from a stream callback. */
  OK(streamcomm_group_start());
  EXPECT_RC(USAGE, "streamcomm_comm_split", streamcomm_comm_split(comm, 0, 0, &c));
  EXPECT_RC(USAGE, "streamcomm_comm_shrink", streamcomm_comm_shrink(comm, NULL, 0, &c));
  OK(streamcomm_group_end());
  struct regroup g = {comm, junk, junk, STREAMCOMM_SUCCESS, STREAMCOMM_SUCCESS};
  OK(streamcomm_stream_enqueue_callback(s, regroup_callback, &g));
  OK(streamcomm_stream_synchronize(s));
  EXPECT(g.split_rc == USAGE && g.shrink_rc == USAGE);
  EXPECT(g.split_out == NULL && g.shrink_out == NULL);

  /* The valid forms on one rank: a communicator of one, or none. */
  OK(streamcomm_comm_split(comm, STREAMCOMM_SPLIT_NOCOLOR, 0, &c));
  EXPECT(c == NULL);
  OK(streamcomm_comm_split(comm, INT_MAX, INT_MIN, &c));
  EXPECT(c != NULL && c != comm);
  OK(streamcomm_comm_rank(c, &v));
  EXPECT(v == 0);
  OK(streamcomm_comm_size(c, &v));
  EXPECT(v == 1);
  OK(streamcomm_comm_destroy(c));
  EXPECT_RC(HANDLE, "streamcomm_comm_rank", streamcomm_comm_rank(c, &v));
  c = junk;
  OK(streamcomm_comm_shrink(comm, ranks, 0, &c)); /* nexclude 0: exclude is not read */
  EXPECT(c != NULL && c != comm);
  OK(streamcomm_comm_size(c, &v));
  EXPECT(v == 1);
  OK(streamcomm_comm_destroy(c));
  OK(streamcomm_comm_shrink(comm, NULL, 0, &c));
  OK(streamcomm_comm_destroy(c));
  /* The parent still works. */
  OK(streamcomm_barrier_host(comm));
}

static void after_destroy(streamcomm_comm_t comm, streamcomm_stream_t s, const streamcomm_unique_id_t *id) {
  double x = 1;
  int v;
  streamcomm_result_t r;
  streamcomm_comm_t c;
  OK(streamcomm_stream_destroy(s));
  EXPECT_RC(HANDLE, "streamcomm_stream_destroy", streamcomm_stream_destroy(s));
  EXPECT_RC(HANDLE, "streamcomm_stream_synchronize", streamcomm_stream_synchronize(s));
  EXPECT_RC(HANDLE, "streamcomm_barrier", streamcomm_barrier(comm, s));
  OK(streamcomm_comm_destroy(comm));
  EXPECT_RC(HANDLE, "streamcomm_comm_destroy", streamcomm_comm_destroy(comm));
  EXPECT_RC(HANDLE, "streamcomm_comm_abort", streamcomm_comm_abort(comm));
  EXPECT_RC(HANDLE, "streamcomm_comm_rank", streamcomm_comm_rank(comm, &v));
  EXPECT_RC(HANDLE, "streamcomm_comm_split", streamcomm_comm_split(comm, 0, 0, &c));
  EXPECT_RC(HANDLE, "streamcomm_comm_shrink", streamcomm_comm_shrink(comm, NULL, 0, &c));
  EXPECT_RC(HANDLE, "streamcomm_comm_get_async_error", streamcomm_comm_get_async_error(comm, &r));
  EXPECT_RC(HANDLE, "streamcomm_barrier_host", streamcomm_barrier_host(comm));
  EXPECT_RC(HANDLE, "streamcomm_comm_destroy", streamcomm_comm_destroy(NULL));
  EXPECT_RC(HANDLE, "streamcomm_comm_abort", streamcomm_comm_abort(NULL));

  /* Abort releases the handle; the next use is reported. */
  streamcomm_unique_id_t id2;
  streamcomm_comm_t c2;
  streamcomm_stream_t s2;
  (void)id;
  OK(streamcomm_get_unique_id(&id2));
  OK(streamcomm_comm_init_rank(&c2, 1, &id2, 0));
  OK(streamcomm_stream_create(&s2));
  OK(streamcomm_comm_abort(c2));
  EXPECT_RC(HANDLE, "streamcomm_all_reduce", streamcomm_all_reduce(&x, &x, 1, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, c2, s2));
  OK(streamcomm_stream_destroy(s2));

  /* No launcher variables: the missing one is named. */
  clearenv();
  streamcomm_comm_t c3 = (streamcomm_comm_t)(uintptr_t)0x1234;
  EXPECT_RC(ARG, "streamcomm_comm_init_from_env", streamcomm_comm_init_from_env(&c3));
  EXPECT(c3 == NULL);
}

/* The CUDA entry points: without a GPU, creation is UNAVAILABLE (never a
 * crash); with one it succeeds. Bad handles, data types and pointers are
 * refused either way. */
static void cuda(streamcomm_comm_t comm, streamcomm_stream_t s) {
  double x = 1.0;
  streamcomm_result_t async_rc = STREAMCOMM_SUCCESS;
  streamcomm_cuda_comm_t cc = (streamcomm_cuda_comm_t)(uintptr_t)0x1234;
  EXPECT_RC(ARG, "streamcomm_cuda_comm_create", streamcomm_cuda_comm_create(comm, 0, NULL));
  EXPECT_RC(ARG, "streamcomm_cuda_comm_create", streamcomm_cuda_comm_create(comm, -1, &cc));
  EXPECT(cc == NULL);
  EXPECT_RC(HANDLE, "streamcomm_cuda_comm_create",
            streamcomm_cuda_comm_create((streamcomm_comm_t)s, 0, &cc));
  streamcomm_result_t rc = streamcomm_cuda_comm_create(comm, 0, &cc);
  checks++;
  if (rc == STREAMCOMM_UNAVAILABLE) {
    EXPECT(cc == NULL);
    EXPECT(strstr(streamcomm_last_error(), "streamcomm_cuda_comm_create") != NULL);
  } else {
    EXPECT(rc == STREAMCOMM_SUCCESS && cc != NULL);
    /* A host pointer of the wrong alignment is refused before the device sees it. */
    EXPECT_RC(ARG, "streamcomm_cuda_all_reduce",
              streamcomm_cuda_all_reduce((char *)&x + 1, (char *)&x + 1, 1, STREAMCOMM_FLOAT64,
                                         STREAMCOMM_SUM, cc, NULL));
    OK(streamcomm_cuda_comm_get_async_error(cc, &async_rc));
    EXPECT(async_rc == STREAMCOMM_SUCCESS);
    OK(streamcomm_cuda_comm_destroy(cc));
  }
  /* Handles of another kind, or none, are refused by every function. */
  streamcomm_cuda_comm_t bad = (streamcomm_cuda_comm_t)comm;
  EXPECT_RC(HANDLE, "streamcomm_cuda_all_reduce",
            streamcomm_cuda_all_reduce(&x, &x, 1, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, bad, NULL));
  EXPECT_RC(ARG, "streamcomm_cuda_all_reduce",
            streamcomm_cuda_all_reduce(&x, &x, 1, (streamcomm_data_type_t)99, STREAMCOMM_SUM, bad,
                                       NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_broadcast",
            streamcomm_cuda_broadcast(&x, &x, 1, STREAMCOMM_FLOAT64, 0, bad, NULL));
  EXPECT_RC(ARG, "streamcomm_cuda_broadcast",
            streamcomm_cuda_broadcast(&x, &x, 1, STREAMCOMM_FLOAT64, -1, bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_reduce",
            streamcomm_cuda_reduce(&x, &x, 1, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, 0, bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_all_gather",
            streamcomm_cuda_all_gather(&x, &x, 1, STREAMCOMM_FLOAT64, bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_reduce_scatter",
            streamcomm_cuda_reduce_scatter(&x, &x, 1, STREAMCOMM_FLOAT64, STREAMCOMM_SUM, bad,
                                           NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_all_to_all",
            streamcomm_cuda_all_to_all(&x, &x, 1, STREAMCOMM_FLOAT64, bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_barrier", streamcomm_cuda_barrier(bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_sendrecv",
            streamcomm_cuda_sendrecv(&x, 1, 0, &x, 1, 0, STREAMCOMM_FLOAT64, bad, NULL));
  EXPECT_RC(HANDLE, "streamcomm_cuda_comm_get_async_error",
            streamcomm_cuda_comm_get_async_error(bad, &async_rc));
  EXPECT_RC(HANDLE, "streamcomm_cuda_comm_destroy", streamcomm_cuda_comm_destroy(bad));
  EXPECT_RC(HANDLE, "streamcomm_cuda_comm_destroy", streamcomm_cuda_comm_destroy(NULL));
}

int main(void) {
  streamcomm_unique_id_t id;
  streamcomm_comm_t comm;
  streamcomm_stream_t s;
  strings();
  unique_ids(&id);
  init(&id, &comm);
  OK(streamcomm_stream_create(&s));
  queries(comm, s);
  streams_and_events(comm, s);
  collectives(comm, s);
  p2p_and_groups(comm, s);
  split_and_shrink(comm, s);
  cuda(comm, s);
  after_destroy(comm, s, &id);
  printf("bad_args: %d checks OK\n", checks);
  return 0;
}
