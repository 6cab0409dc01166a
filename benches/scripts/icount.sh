#!/usr/bin/env bash
# Counts the instructions of small host calls with callgrind and checks
# them against benches/icount-ceilings.txt: shm 8-byte send_host and
# recv_host, a 2-rank barrier_host and all_reduce_host of two f32 (see benches/icount/src/main.rs for
# how each call is isolated). Instruction counts do not depend on the
# machine's load, so the check is exact where a timing would be noise.
#
# usage: benches/scripts/icount.sh [ITERS]   (default 1000 calls per op)
# env:   ICOUNT_BIN  a built streamcomm-icount (default: build it, release)
# Exit status: 0 when every op is within its ceiling, 1 when one is above,
# 2 when a tool is missing or a run fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-1000}
ceilings=benches/icount-ceilings.txt
command -v valgrind >/dev/null || { echo "icount: valgrind is needed" >&2; exit 2; }
if [ -z "${ICOUNT_BIN:-}" ]; then
  cargo build --quiet --release -p streamcomm-icount
  ICOUNT_BIN="$(cargo metadata --no-deps --format-version 1 --offline |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/streamcomm-icount"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
printf '%-14s %12s %10s\n' op instr/call ceiling
while read -r op ceiling _; do
  case "$op" in ''|'#'*) continue ;; esac
  if ! valgrind --tool=callgrind --callgrind-out-file="$out/$op" \
      --toggle-collect="streamcomm_icount_$op" "$ICOUNT_BIN" "$op" "$iters" \
      >"$out/$op.log" 2>&1; then
    echo "icount: $op failed under valgrind:" >&2
    tail -20 "$out/$op.log" >&2
    exit 2
  fi
  total=$(awk '/^totals:/ {print $2}' "$out/$op")
  per=$(( (total + iters / 2) / iters ))
  verdict=ok
  if [ "$per" -gt "$ceiling" ]; then
    verdict="ABOVE CEILING"
    status=1
  fi
  printf '%-14s %12d %10d  %s\n' "$op" "$per" "$ceiling" "$verdict"
done < "$ceilings"
exit "$status"
