#!/usr/bin/env bash
# Inside the Soft-RoCE guest (see scripts/verbs-check.sh for the runner):
# perftest's ib_write_lat / ib_write_bw next to streamcomm-bench sendrecv
# over STREAMCOMM_TRANSPORT=verbs (8 B ping-pong latency, 64 MiB
# bandwidth), in one guest session. Everything is emulated (TCG +
# rdma_rxe): compare ratios only, and mind the host's load (a busy host
# stalls the guest's vCPUs; run it twice, ROUNDS=2).
# Build first: cargo build --release -p streamcomm-bench --features verbs
# Run: RXE_TIMEOUT=900 ../shared/rxe/run-in-rxe-guest.sh scripts/verbs-bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-target/release/streamcomm-bench}
IP=192.168.77.1
GID=${GID:-1}
pair() { # server and client of a perftest pair
  $1 >/tmp/srv.out 2>&1 &
  sleep 1
  $1 "$IP" 2>&1 | grep -E "^ *[0-9]|bytes" | tail -2
  wait
}
for round in $(seq "${ROUNDS:-1}"); do
  echo "=== round $round (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "== ib_write_lat 8 B"
  pair "ib_write_lat -d rxe0 -x $GID -s 8 -n 2000 -F"
  echo "== streamcomm-bench sendrecv 8 B ping-pong over verbs"
  STREAMCOMM_TRANSPORT=verbs $B sendrecv -b 8 -e 8 -n 2 -w 1 --ranks 2 \
    --latency-iters "${LAT_ITERS:-2000}" 2>&1 | grep -E "one-way latency"
  echo "== ib_write_bw 64 MiB"
  pair "ib_write_bw -d rxe0 -x $GID -s 67108864 -n 10 -F --report_gbits"
  echo "== streamcomm-bench sendrecv 64 MiB over verbs"
  STREAMCOMM_TRANSPORT=verbs $B sendrecv -b 64M -e 64M -n "${ITERS:-5}" -w 1 --ranks 2 \
    --latency-iters 10 2>&1 | grep -E "^ *[0-9]|#  *size"
done
