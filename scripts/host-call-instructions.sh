#!/usr/bin/env bash
# Instructions one 8-byte host call costs (send_host / recv_host), counted by
# callgrind: a figure that does not move with the machine's load, unlike a
# latency (on these shared 2-core hosts and in the emulated Soft-RoCE guest,
# latencies move by 1.5x between runs; instruction counts by a few percent).
#
# Runs the ping-pong of `streamcomm-bench sendrecv` with two ranks started
# by hand: rank 0 natively, rank 1 under callgrind, which counts only inside
# `Communicator::run_host`, so start-up, the sweep and the stream-phase
# ping-pong are left out. Rank 1's waits are short, since its peer runs
# natively: what is counted is the work of a call (including the few spins
# of a wait), not the time spent waiting. Prints, per binary, the
# instructions per host call (two calls per round trip).
#
#   TRANSPORT=tcp scripts/host-call-instructions.sh A B     # here, tcp or shm
#   ../shared/rxe/run-in-rxe-guest.sh env TRANSPORT=verbs \
#     scripts/host-call-instructions.sh A B                 # verbs, in the guest
# (A, B: streamcomm-bench binaries, e.g. copies of target/release/streamcomm-bench;
#  verbs needs them built with --features verbs.) Needs valgrind.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BENCH_BINARY..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 2; }
ITERS=${ITERS:-2000}
WARMUP=1000 # latency::WARMUP
export STREAMCOMM_TRANSPORT=${TRANSPORT:-tcp} STREAMCOMM_TIMEOUT=600
# The benchmark's machine figures (only printed; not measured here).
export STREAMCOMM_BENCH_MEMCPY_GBPS=1 STREAMCOMM_BENCH_C2C_US=1 STREAMCOMM_BENCH_C2C_P99_US=1
export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=$((29000 + RANDOM % 2000))
for bench in "$@"; do
  port=$((port + 1))
  args=(sendrecv -b 8 -e 8 -n 2 -w 1 --latency-iters "$ITERS")
  MASTER_PORT=$port RANK=0 LOCAL_RANK=0 "$bench" "${args[@]}" >"$out/rank0" 2>&1 &
  MASTER_PORT=$port RANK=1 LOCAL_RANK=1 valgrind --tool=callgrind \
    --callgrind-out-file="$out/cg" --collect-atstart=no \
    '--toggle-collect=streamcomm::comm::p2p::<impl streamcomm::comm::Communicator>::run_host' \
    "$bench" "${args[@]}" >"$out/rank1" 2>&1 || { cat "$out/rank1" >&2; exit 1; }
  wait
  ir=$(sed -nE 's/.*Collected : ([0-9]+).*/\1/p' "$out/rank1")
  calls=$((2 * (WARMUP + ITERS)))
  echo "$bench ($STREAMCOMM_TRANSPORT): $((ir / calls)) instructions per host call ($ir over $calls calls)"
done
