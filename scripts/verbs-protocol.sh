#!/usr/bin/env bash
# Inside the Soft-RoCE guest: what the verbs transport's wire protocol costs
# on the device, apart from the library. In turns, in one guest session:
#   perftest's ib_write_lat -s 8 (plain inline write, polled in memory);
#   verbs-pingpong (scripts/verbs-pingpong.c) with the same protocol
#   ("write 8"), with 32 bytes ("write 32"), then with streamcomm's ("imm
#   32": one inline WRITE_WITH_IMM of a 24-byte slot header and 8 bytes of
#   payload, reaped as a receive completion), into a 4 KiB and a 32 MiB
#   registered ring;
#   with STAND_INS="PP_WORK=1300 PP_SYSCALLS=2 ..." (words of
#   verbs-pingpong's stand-in knobs), "imm 32" again with each of them, to
#   price a library's extra instructions, page touches or system calls;
#   streamcomm-bench's 8 B host calls over verbs (BENCH, if given).
# Build first (on the host):
#   cc -O2 -o target/ab/verbs-pingpong scripts/verbs-pingpong.c -libverbs -lpthread
#   cargo build --release -p streamcomm-bench --features verbs
# then: RXE_TIMEOUT=900 ROUNDS=4 ../shared/rxe/run-in-rxe-guest.sh \
#         scripts/verbs-protocol.sh target/ab/verbs-pingpong target/release/streamcomm-bench
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PINGPONG [BENCH]" >&2; exit 2; }
PP=$1
BENCH=${2:-}
# shellcheck source=scripts/rxe-latency.sh
. "$(dirname "$0")/rxe-latency.sh"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${ROUNDS:-3}"); do
  echo "round $round: ib_write_lat $(perftest)"
  for mode in "write 8 4096" "write 32 4096" "imm 32 4096" "imm 32 $((32 << 20))"; do
    # shellcheck disable=SC2086 # the mode is three words
    echo "round $round: $("$PP" $mode 3000)"
  done
  for knob in ${STAND_INS:-}; do
    echo "round $round: $knob $(env "$knob" "$PP" imm 32 4096 3000)"
  done
  if [ -n "$BENCH" ]; then
    echo "round $round: streamcomm host calls $(host_calls "$BENCH")"
  fi
done
