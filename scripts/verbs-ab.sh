#!/usr/bin/env bash
# Inside the Soft-RoCE guest: the 8 B host-call latency of several builds
# of streamcomm-bench over verbs, in turns with perftest's ib_write_lat, in
# one guest session (the host's load moves the emulated figures by 1.5x
# between sessions: compare within one). Prints each round's perftest
# typical latency and each build's p50 / p99 one way.
# Build each variant (cargo build --release -p streamcomm-bench --features
# verbs) and copy the binary somewhere, then run:
#   RXE_TIMEOUT=900 ROUNDS=6 ../shared/rxe/run-in-rxe-guest.sh \
#     scripts/verbs-ab.sh /path/to/A /path/to/B
set -uo pipefail
IP=192.168.77.1
GID=${GID:-1}
[ $# -ge 1 ] || { echo "usage: $0 BENCH_BINARY..." >&2; exit 2; }
perftest() {
  ib_write_lat -d rxe0 -x "$GID" -s 8 -n 3000 -F >/tmp/srv.out 2>&1 &
  sleep 1
  ib_write_lat -d rxe0 -x "$GID" -s 8 -n 3000 -F "$IP" 2>&1 |
    awk '/^ *8 /{print "typical " $5 " us"}'
  wait
}
host_calls() {
  STREAMCOMM_TRANSPORT=verbs "$1" sendrecv -b 8 -e 8 -n 2 -w 1 --ranks 2 \
    --latency-iters "${LAT_ITERS:-3000}" 2>&1 |
    sed -nE 's/.*host calls.*p50 ([0-9.]+) us.*p99 ([0-9.]+) us.*/p50 \1 us, p99 \2 us/p'
}
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${ROUNDS:-3}"); do
  echo "round $round: ib_write_lat $(perftest)"
  for b in "$@"; do echo "round $round: $b $(host_calls "$b")"; done
done
