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
[ $# -ge 1 ] || { echo "usage: $0 BENCH_BINARY..." >&2; exit 2; }
# shellcheck source=scripts/rxe-latency.sh
. "$(dirname "$0")/rxe-latency.sh"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${ROUNDS:-3}"); do
  echo "round $round: ib_write_lat $(perftest)"
  for b in "$@"; do echo "round $round: $b $(host_calls "$b")"; done
done
