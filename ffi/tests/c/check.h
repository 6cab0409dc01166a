/*
 * What the multi-rank C tests share: the rank for messages, CHECK for a
 * call that must succeed, EXPECT for a condition, and the generator every
 * rank computes the same values from (splitmix64 of seed, rank, index, salt).
 */
#ifndef STREAMCOMM_TEST_CHECK_H
#define STREAMCOMM_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "streamcomm.h"

static int g_rank = -1;

#define CHECK(call)                                                                       \
  do {                                                                                    \
    streamcomm_result_t rc_ = (call);                                                     \
    if (rc_ != STREAMCOMM_SUCCESS) {                                                      \
      fprintf(stderr, "rank %d: %s failed: %s (%d): %s\n", g_rank, #call,                 \
              streamcomm_error_string(rc_), (int)rc_, streamcomm_last_error());           \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define EXPECT(cond, ...)                                                                 \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "rank %d: check failed: %s: ", g_rank, #cond);                      \
      fprintf(stderr, __VA_ARGS__);                                                       \
      fprintf(stderr, "\n");                                                              \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* splitmix64. */
static inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t g_seed;
/* The value every rank computes for (seed, rank, index, salt). */
static inline uint64_t value(int rank, size_t i, uint64_t salt) {
  return mix(g_seed ^ mix(((uint64_t)rank << 48) ^ (uint64_t)i ^ (salt << 40)));
}

#endif
