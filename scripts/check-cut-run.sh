#!/usr/bin/env bash
# check-cut-run.sh: the GPU check's runner, cut short, still reports.
#
# Runs `scripts/gpu-check.sh --stand-in --no-build` (over the binaries an
# earlier --stand-in run collected) with a budget too small for its steps
# (GPU_CHECK_BUDGET, default 30 s here) and checks what a GPU machine's
# operator would read after such a run: it ended within the budget (plus
# the runner's grace for killing a step), summary.txt holds a verdict for
# every one of the 9 steps, written as each ended (the cut ones, and those
# not started for want of budget, TIMEOUT),
# the final count line, and gpu-check.log the steps' output.
#
# usage: scripts/check-cut-run.sh        (after scripts/gpu-check.sh --stand-in)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT="$TARGET/gpu-check/cut"
BUDGET=${GPU_CHECK_BUDGET:-30}
rm -rf "$OUT"
start=$(date +%s)
GPU_CHECK_BUDGET=$BUDGET GPU_CHECK_BENCH_RESERVE=$((BUDGET / 4)) OUT="$OUT" \
  "$ROOT/scripts/gpu-check.sh" --stand-in --no-build >"$TARGET/gpu-check-cut.txt" 2>&1
status=$?
took=$(($(date +%s) - start))
fail() {
  echo "check-cut-run: $*" >&2
  echo "--- its output:" >&2
  tail -n 40 "$TARGET/gpu-check-cut.txt" >&2
  exit 1
}
summary="$OUT/summary.txt"
[[ -s "$summary" ]] || fail "no summary.txt after a run cut at $BUDGET s"
# Every step's grace: a step past its timeout is killed 5 s later.
((took <= BUDGET + 7 * 5 + 30)) || fail "the run took $took s for a $BUDGET s budget"
((status != 0)) || fail "a run cut at $BUDGET s passed: is the budget still enforced?"
steps=(probe quickstarts memops reduce ipc cuda-backend sanitizer benches torch-nccl)
for s in "${steps[@]}"; do
  grep -Eq "^$s +(ok|FAILED|TIMEOUT|skipped) " "$summary" ||
    fail "no verdict for step $s in summary.txt"
done
grep -Eq '^[a-z-]+ +(TIMEOUT|FAILED) ' "$summary" ||
  fail "no step was cut by a $BUDGET s budget"
grep -Eq '^gpu-check: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$summary" ||
  fail "no final count in summary.txt"
[[ -s "$OUT/gpu-check.log" ]] || fail "no gpu-check.log"
echo "check-cut-run: cut at $BUDGET s, ended after $took s with every step's verdict:"
grep -E "^($(IFS='|'; echo "${steps[*]}")) " "$summary" | sed 's/^/  /'
