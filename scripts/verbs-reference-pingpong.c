// The bare-protocol reference for streamcomm's verbs transport: a minimal
// two-process RDMA ping-pong on one verbs device, to tell the cost of the
// transport's wire protocol from the cost of its software
// (docs/design/verbs-protocol.md). scripts/verbs-check.sh compiles it with
// -Wall -Wextra -Werror and runs each protocol once in the Soft-RoCE guest;
// it checks every message it receives.
//
// streamcomm's verbs transport sends a small message as one inline
// RDMA WRITE_WITH_IMM into the peer's slot ring; the peer reaps the receive
// completion and puts the receive back. perftest's ib_write_lat sends a
// plain inline RDMA WRITE and the peer polls the buffer's last byte. This
// program does either, with nothing else around it (no library, no rings,
// no other thread unless PP_CHANNEL asks for one), so in one Soft-RoCE
// guest session
//
//   verbs-reference-pingpong write 8        ~ ib_write_lat -s 8
//   verbs-reference-pingpong imm 32 RING    ~ streamcomm's 8 B host call (32
//                                             bytes of slot header and payload,
//                                             written into a ring of RING bytes)
//
// (usage: write|imm SIZE [RING_BYTES [ITERS]], default 4096 and 3000).
//
// isolate what the protocol costs on the device, apart from the library.
// Prints the median and p99 one-way latency (half a round trip, timed with
// the cycle counter and scaled by the run's wall clock, as perftest does).
//
// Build: cc -O2 -o target/verbs-reference-pingpong scripts/verbs-reference-pingpong.c -libverbs -lpthread
// Run: inside the guest that scripts/verbs-check.sh boots (see there).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define CHECK(c)                                                          \
  do {                                                                    \
    if (!(c)) {                                                           \
      fprintf(stderr, "verbs-reference-pingpong: %s failed (line %d)\n", #c, __LINE__); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

struct endpoint {
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
  union ibv_gid gid;
};

// Library-like conditions, each off by default (environment variables):
//   PP_CHANNEL=1  the CQ reports to a completion channel, on which a second
//                 thread sleeps in poll(2) (20 ms at most), the CQ armed for
//                 solicited completions only, as the library's idle proxy;
//   PP_ONE_CQ=1   one CQ for sends and receives, as the library's;
//   PP_DEPTH=N    send and receive queue depth (default 128);
//   PP_PAUSE=N    N pause instructions between two polls of a wait, and
//   PP_POLL_EVERY=K  poll the CQ at every K-th check only (the others read
//                 memory), as the library's waits do (1 and 4 there).
// And stand-ins for a library's software path, done before every send:
//   PP_TOUCH=N    a read and a write in each of N distinct 4 KiB pages;
//   PP_WORK=N     N steps of a dependent arithmetic chain (~3 instructions);
//   PP_SYSCALLS=N N cheap system calls (getppid).
static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  struct ibv_comp_channel *chan;
  _Atomic int stop; // set by main when the ping-pong is done
  volatile uint8_t *buf;
  size_t ring;
  int gid_index;
  union ibv_gid gid;
};

static void open_side(struct side *s, size_t ring) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0);
  s->ctx = ibv_open_device(list[0]);
  CHECK(s->ctx);
  s->pd = ibv_alloc_pd(s->ctx);
  CHECK(s->pd);
  int depth = env_int("PP_DEPTH", 128);
  s->chan = env_int("PP_CHANNEL", 0) ? ibv_create_comp_channel(s->ctx) : NULL;
  s->scq = ibv_create_cq(s->ctx, 2 * depth, NULL, s->chan, 0);
  s->rcq = env_int("PP_ONE_CQ", 0) ? s->scq : ibv_create_cq(s->ctx, 2 * depth, NULL, s->chan, 0);
  CHECK(s->scq && s->rcq);
  struct ibv_qp_init_attr qa = {.send_cq = s->scq, .recv_cq = s->rcq, .qp_type = IBV_QPT_RC};
  qa.cap.max_send_wr = depth;
  qa.cap.max_recv_wr = depth;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 64;
  s->qp = ibv_create_qp(s->pd, &qa);
  CHECK(s->qp);
  s->ring = ring;
  CHECK(posix_memalign((void **)&s->buf, 4096, ring) == 0);
  memset((void *)s->buf, 0, ring);
  s->mr = ibv_reg_mr(s->pd, (void *)s->buf, ring,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(s->mr);
  s->gid_index = -1;
  for (int i = 0; i < 16 && s->gid_index < 0; i++) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(s->ctx, 1, i, &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.gid.raw[10] == 0xff && e.gid.raw[11] == 0xff) {
      s->gid_index = i;
      s->gid = e.gid;
    }
  }
  CHECK(s->gid_index >= 0);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  CHECK(!ibv_modify_qp(s->qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
  ibv_free_device_list(list);
}

static void connect_side(struct side *s, const struct endpoint *peer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                          .dest_qp_num = peer->qpn, .rq_psn = 0,
                          .max_dest_rd_atomic = 1, .min_rnr_timer = 1};
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer->gid;
  a.ah_attr.grh.sgid_index = s->gid_index;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  CHECK(!ibv_modify_qp(s->qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                          .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1};
  CHECK(!ibv_modify_qp(s->qp, &r,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

// The library's idle proxy: arm for solicited completions, sleep on the
// channel, take and acknowledge what comes, again.
static void *idle_proxy(void *arg) {
  struct side *s = arg;
  while (!s->stop) {
    CHECK(!ibv_req_notify_cq(s->rcq, 1));
    if (s->scq != s->rcq) CHECK(!ibv_req_notify_cq(s->scq, 1));
    struct pollfd p = {.fd = s->chan->fd, .events = POLLIN};
    if (poll(&p, 1, 20) > 0) {
      struct ibv_cq *cq;
      void *ctx;
      if (!ibv_get_cq_event(s->chan, &cq, &ctx)) ibv_ack_cq_events(cq, 1);
    }
  }
  return NULL;
}

static void post_recv(struct side *s) {
  struct ibv_recv_wr wr = {.wr_id = 0, .num_sge = 0}, *bad;
  CHECK(!ibv_post_recv(s->qp, &wr, &bad));
}

// Receive completions reaped so far, and the last one's immediate.
struct recvs {
  uint64_t count;
  uint32_t last_imm;
};

// Polls `cq` once, counting what it holds: with one CQ for both queues
// (PP_ONE_CQ) a wait for a send's completion may reap a receive's.
static void reap(struct ibv_cq *cq, uint64_t *sends, struct recvs *r) {
  struct ibv_wc wc;
  int got = ibv_poll_cq(cq, 1, &wc);
  CHECK(got >= 0);
  if (got == 0) return;
  CHECK(wc.status == IBV_WC_SUCCESS);
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    r->count++;
    r->last_imm = ntohl(wc.imm_data);
  } else {
    ++*sends;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

// One side of the ping-pong: `initiator` sends first. Message `i` lands at
// offset (i * 4096) % ring of the peer's buffer, as successive slots do.
static void run(struct side *s, const struct endpoint *peer, int imm, size_t size,
                int iters, int initiator) {
  uint8_t msg[64] = {0};
  uint64_t sends = 0, reaped_sends = 0, taken = 0;
  int pauses = env_int("PP_PAUSE", 0);
  unsigned poll_every = (unsigned)env_int("PP_POLL_EVERY", 1);
  CHECK(poll_every >= 1);
  int touch = env_int("PP_TOUCH", 0), work = env_int("PP_WORK", 0);
  int syscalls = env_int("PP_SYSCALLS", 0);
  CHECK(touch >= 0 && work >= 0 && syscalls >= 0);
  size_t page = 4096 + 64;
  volatile uint8_t *scratch = touch ? calloc((size_t)touch, page) : NULL;
  CHECK(!touch || scratch);
  uint64_t chain = 1;
  struct recvs recvs = {0, 0};
  uint64_t *t = calloc(iters, sizeof *t);
  CHECK(t);
  size_t stride = 4096, slots = s->ring / stride;
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  uint64_t c0 = __rdtsc();
  for (int i = 0; i < iters; i++) {
    size_t off = (i % slots) * stride;
    uint8_t mark = (uint8_t)(i % 255 + 1);
    uint64_t start = __rdtsc();
    for (int turn = 0; turn < 2; turn++) {
      int sending = (turn == 0) == initiator;
      if (sending) {
        for (int j = 0; j < touch; j++) scratch[(size_t)j * page] += 1;
        for (int j = 0; j < work; j++) chain = chain * 6364136223846793005ull + (uint64_t)j;
        for (int j = 0; j < syscalls; j++) syscall(SYS_getppid);
        if (work) msg[0] = (uint8_t)chain;  // keeps the chain; else the send is as before
        msg[size - 1] = mark;
        struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = (uint32_t)size,
                              .lkey = s->mr->lkey};
        struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
        wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr.imm_data = htonl((uint32_t)i);
        wr.send_flags = IBV_SEND_INLINE | (i % 64 == 63 ? IBV_SEND_SIGNALED : 0);
        wr.wr.rdma.remote_addr = peer->addr + off;
        wr.wr.rdma.rkey = peer->rkey;
        CHECK(!ibv_post_send(s->qp, &wr, &bad));
        if (wr.send_flags & IBV_SEND_SIGNALED) {
          sends++;
          while (reaped_sends < sends) reap(s->scq, &reaped_sends, &recvs);
        }
      } else if (imm) {
        for (unsigned k = 0; recvs.count == taken; k++) {
          if (k % poll_every == 0) reap(s->rcq, &reaped_sends, &recvs);
          for (int j = 0; j < pauses; j++) _mm_pause();
        }
        taken++;
        CHECK(recvs.count == taken && recvs.last_imm == (uint32_t)i);
        CHECK(s->buf[off + size - 1] == mark);
        post_recv(s);
      } else {
        while (s->buf[off + size - 1] != mark)
          for (int j = 0; j < pauses; j++) _mm_pause();
      }
    }
    t[i] = __rdtsc() - start;
  }
  uint64_t c1 = __rdtsc();
  clock_gettime(CLOCK_MONOTONIC, &w1);
  if (initiator) {
    double ns = (w1.tv_sec - w0.tv_sec) * 1e9 + (w1.tv_nsec - w0.tv_nsec);
    double per_cycle = ns / (double)(c1 - c0);
    qsort(t, iters, sizeof *t, cmp_u64);
    printf("%s %zu B ring %zu: one way p50 %.2f us, p99 %.2f us\n", imm ? "imm" : "write", size,
           s->ring, t[iters / 2] * per_cycle / 2e3, t[iters * 99 / 100] * per_cycle / 2e3);
  }
  free(t);
  free((void *)scratch);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s write|imm SIZE [RING_BYTES [ITERS]]\n", argv[0]);
    return 2;
  }
  int imm = strcmp(argv[1], "imm") == 0;
  size_t size = strtoul(argv[2], NULL, 0);
  size_t ring = argc > 3 ? strtoul(argv[3], NULL, 0) : 4096;
  int iters = argc > 4 ? atoi(argv[4]) : 3000;
  CHECK(size >= 1 && size <= 64 && ring >= 4096 && iters > 0);
  int to_child[2], to_parent[2];
  CHECK(!pipe(to_child) && !pipe(to_parent));
  pid_t pid = fork();
  CHECK(pid >= 0);
  int initiator = pid > 0;
  struct side s;
  open_side(&s, ring);
  struct endpoint me = {s.qp->qp_num, (uintptr_t)s.buf, s.mr->rkey, s.gid}, peer;
  int wfd = initiator ? to_child[1] : to_parent[1];
  int rfd = initiator ? to_parent[0] : to_child[0];
  CHECK(write(wfd, &me, sizeof me) == sizeof me);
  CHECK(read(rfd, &peer, sizeof peer) == sizeof peer);
  connect_side(&s, &peer);
  // Both sides ready (receives posted) before the first message.
  if (imm)
    for (int i = 0; i < 64; i++) post_recv(&s);
  pthread_t proxy;
  s.stop = 0;
  if (s.chan) {
    CHECK(!pthread_create(&proxy, NULL, idle_proxy, &s));
  }
  char go = 1;
  CHECK(write(wfd, &go, 1) == 1);
  CHECK(read(rfd, &go, 1) == 1);
  run(&s, &peer, imm, size, iters, initiator);
  if (s.chan) {
    s.stop = 1;
    pthread_join(proxy, NULL);
  }
  if (initiator) {
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}
