#!/usr/bin/env bash
# gpu-check-run.sh: the steps of the GPU check, over binaries built
# beforehand. scripts/gpu-check.sh copies it into a prepared bundle as
# run.sh (the binaries beside it), and runs it itself for --stand-in.
#
# usage: bash run.sh                 on the GPU machine: NVIDIA's driver only
#        GPU_CHECK_MODE=stand-in GPU_CHECK_BIN=DIR bash gpu-check-run.sh
#                                    (what `gpu-check.sh --stand-in` does: the
#                                    CPU stand-in libcuda on LD_LIBRARY_PATH)
#
# The binaries (in GPU_CHECK_BIN, default this script's directory):
#   test-device_stream test-device_reduce test-nvrtc_compile   (streamcomm-gpu)
#   test-cuda                                                  (the CUDA backend)
#   gpu_quickstart quickstart cuda_allreduce gpu_bench cuda_bench   (examples)
#
# Steps, in order, each under its own timeout (and all of them within
# GPU_CHECK_BUDGET seconds, default 450, so a run ends inside 8 minutes):
#   1 probe        which driver answered (it must be NVIDIA's on a GPU run, the
#                  stand-in's under --stand-in), then every kernel through NVRTC
#                  (on the stand-in, the test run it reuses did that)
#   2 memops       doorbells, stream memory operations, host functions, capture
#   3 reduce       the reduce kernels against a CPU reference
#   4 ipc          CUDA IPC between two processes
#   5 cuda-backend the CUDA backend's tests, --test-threads=1 --nocapture
#   6 quickstarts  gpu_quickstart, the main quick start (2 ranks) and
#                  cuda_allreduce (2 ranks, cudarc buffers), each checked for
#                  its OK line (the quick start for the CUDA backend too)
#   7 benches      gpu_bench and cuda_bench (direct, then staged)
# A verdict line per step, then `gpu-check: N passed, M failed, K skipped`.
#
# Files: with OUT set, at most 4 under $OUT: gpu-check.log (every step's
# output), summary.txt, gpu_bench.json, cuda_bench.json. The kernel cache goes
# to a temporary directory, never under $OUT. Exit status 0 when every step
# passed (or when there is no GPU at all), 1 otherwise.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${GPU_CHECK_BIN:-$HERE}
MODE=${GPU_CHECK_MODE:-gpu}
BUDGET=${GPU_CHECK_BUDGET:-450}
START=$(date +%s)

say() { printf 'gpu-check: %s\n' "$*"; }

# No GPU, no stand-in: say so at once (no binary has to load a driver).
has_libcuda() {
  local d dirs
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do
    [[ -n "$d" && ( -e "$d/libcuda.so.1" || -e "$d/libcuda.so" ) ]] && return 0
  done
  ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'
}
if ! has_libcuda; then
  echo "skipped: no GPU (no libcuda.so.1 or libcuda.so on this machine)"
  say "0 passed, 0 failed, 7 skipped"
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [[ -n "${OUT:-}" ]]; then mkdir -p "$OUT"; LOGDIR=$OUT; else LOGDIR=$WORK; fi
LOG="$LOGDIR/gpu-check.log"
SUMMARY="$LOGDIR/summary.txt"
: >"$LOG"
: >"$SUMMARY"

export STREAMCOMM_REQUIRE_GPU=1
export STREAMCOMM_KERNEL_CACHE="$WORK/kernel-cache"
# Skips of this run are counted here, not in a caller's skip log.
export STREAMCOMM_SKIP_LOG="$WORK/skips.txt"
export RUST_BACKTRACE=1

find_nvrtc() {
  if [[ -n "${STREAMCOMM_NVRTC_LIB:-}" ]]; then echo "$STREAMCOMM_NVRTC_LIB"; return; fi
  local c
  for c in /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib64/libnvrtc.so.12 \
           /usr/local/cuda/lib64/libnvrtc.so /usr/local/cuda-*/lib64/libnvrtc.so.1[23]; do
    [[ -e "$c" ]] && { echo "$c"; return; }
  done
  # PyPI wheels: CUDA 12 puts it in nvidia/cuda_nvrtc/lib, CUDA 13 in nvidia/cu13/lib.
  c=$(python3 -c 'import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [h for v in ("13", "12") for d in dirs for h in sorted(glob.glob(d + "/nvidia/**/libnvrtc.so." + v, recursive=True))]
print(hits[0] if hits else "")' 2>/dev/null)
  [[ -n "$c" ]] && { echo "$c"; return; }
  ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.1[23] /{print $NF; exit}'
}
NVRTC=$(find_nvrtc)
if [[ -n "$NVRTC" ]]; then export STREAMCOMM_NVRTC_LIB="$NVRTC"; fi

PASSED=0 FAILED=0 SKIPPED=0
verdict() { # verdict STEP STATUS DETAIL
  local line
  line=$(printf '%-13s %-8s %s' "$1" "$2" "$3")
  say "$line"
  echo "$line" >>"$SUMMARY"
  case $2 in
    ok) PASSED=$((PASSED + 1)) ;;
    skipped) SKIPPED=$((SKIPPED + 1)) ;;
    *) FAILED=$((FAILED + 1)) ;;
  esac
}

# run STEP LIMIT_S COMMAND...: one command of a step, its output appended to
# the log (and echoed after it ends); the step's timeout, cut to what is left
# of the budget. Returns the command's status (124 on a timeout).
run() {
  local step=$1 limit=$2; shift 2
  local left=$((BUDGET - ($(date +%s) - START)))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    echo "[$step] not started: the run's $BUDGET s budget is spent" | tee -a "$LOG"
    return 124
  fi
  printf '\n=== [%s] %s (limit %ss)\n' "$step" "$*" "$limit" >>"$LOG"
  local before rc
  before=$(wc -l <"$LOG")
  timeout --kill-after=5 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  ((rc == 137)) && rc=124
  ((rc == 124)) && echo "[$step] TIMEOUT after ${limit}s" >>"$LOG"
  tail -n +"$((before + 1))" "$LOG" | tail -n "${TAIL:-40}"
  return $rc
}

# step STEP COMMAND...: runs a shell function as one step and prints its verdict.
step() {
  local name=$1; shift
  local t0 rc status
  t0=$(date +%s)
  printf '\n=== step %s\n' "$name"
  "$@"
  rc=$?
  case $rc in
    0) status=ok ;;
    124) status=TIMEOUT ;;
    *) status=FAILED ;;
  esac
  verdict "$name" "$status" "$(($(date +%s) - t0)) s${DETAIL:+; $DETAIL}"
  DETAIL=
}
DETAIL=
STOP=

need() { # need BINARY: fails the step when a binary is missing
  [[ -x "$BIN/$1" ]] && return 0
  echo "missing binary $BIN/$1" | tee -a "$LOG"
  return 1
}

step_probe() {
  need test-device_stream && need test-nvrtc_compile || return 1
  local out rc
  out=$(TAIL=200 run probe 30 "$BIN/test-device_stream" the_driver_answers_and_names_itself \
    --exact --nocapture --test-threads=1)
  rc=$?
  echo "$out"
  local driver
  driver=$(grep -m1 '^driver: ' <<<"$out" | sed 's/^driver: //')
  ((rc == 0)) && [[ -n "$driver" ]] || { DETAIL="no driver answered"; return 1; }
  DETAIL="driver: $driver"
  case $MODE in
    gpu)
      if [[ "$driver" == *"stand-in"* ]]; then
        DETAIL="the CPU stand-in answered, not NVIDIA's driver: $driver"
        STOP=1
        return 1
      fi ;;
    stand-in)
      if [[ "$driver" != *"streamcomm CPU stand-in"* ]]; then
        DETAIL="another driver than the stand-in answered: $driver"
        return 1
      fi ;;
  esac
  [[ -n "$NVRTC" ]] || { DETAIL="$DETAIL; no NVRTC (set STREAMCOMM_NVRTC_LIB)"; return 1; }
  # NVRTC needs no driver: on the stand-in, the test run this check reuses
  # has compiled every kernel already (nvrtc_compile, which fails in CI
  # without NVRTC).
  [[ $MODE == stand-in ]] && { DETAIL="$DETAIL; kernels compiled by the test run"; return 0; }
  run probe 60 "$BIN/test-nvrtc_compile" --nocapture --test-threads=1
}

step_memops() {
  need test-device_stream || return 1
  run memops 60 "$BIN/test-device_stream" --skip ipc_handle --skip the_driver_answers \
    --nocapture --test-threads=1
}

step_reduce() {
  need test-device_reduce || return 1
  run reduce 60 "$BIN/test-device_reduce" --nocapture --test-threads=1
}

step_ipc() {
  need test-device_stream || return 1
  run ipc 30 "$BIN/test-device_stream" ipc_handle_shares_memory_with_a_child_process \
    --exact --nocapture --test-threads=1
}

step_backend() {
  need test-cuda || return 1
  # On the stand-in, two devices: ranks as threads need one each (the
  # panicking-rank test); on a GPU machine with one GPU that test skips.
  local devices=()
  [[ $MODE == stand-in ]] && devices=(STREAMCOMM_STANDIN_DEVICES=2)
  run cuda-backend 150 env "${devices[@]}" "$BIN/test-cuda" --test-threads=1 --nocapture
}

step_quickstarts() {
  need gpu_quickstart && need quickstart && need cuda_allreduce || return 1
  local out rc=0
  out=$(TAIL=200 run quickstarts 30 "$BIN/gpu_quickstart") || rc=1
  echo "$out"
  grep -qx OK <<<"$out" || { echo "gpu_quickstart did not print OK" | tee -a "$LOG"; rc=1; }
  out=$(TAIL=200 run quickstarts 60 "$BIN/quickstart" 2) || rc=1
  echo "$out"
  grep -q 'backend: CUDA' <<<"$out" ||
    { echo "quickstart did not take the CUDA backend" | tee -a "$LOG"; rc=1; }
  grep -qx OK <<<"$out" || { echo "quickstart did not print OK" | tee -a "$LOG"; rc=1; }
  out=$(TAIL=200 run quickstarts 60 "$BIN/cuda_allreduce" 2) || rc=1
  echo "$out"
  grep -qx OK <<<"$out" || { echo "cuda_allreduce did not print OK" | tee -a "$LOG"; rc=1; }
  return $rc
}

step_benches() {
  need gpu_bench && need cuda_bench || return 1
  local rc=0 bench_out=${OUT:-$WORK}
  # The stand-in moves bytes with the CPU: smaller sizes keep the step short.
  local gpu_args=() cuda_args=(2) staged_args=(2 16777216)
  if [[ $MODE == stand-in ]]; then
    gpu_args=(4194304); cuda_args=(2 4194304); staged_args=(2 1048576)
  fi
  run benches 60 env OUT="$bench_out" "$BIN/gpu_bench" "${gpu_args[@]}" || rc=1
  run benches 90 env OUT="$bench_out" "$BIN/cuda_bench" "${cuda_args[@]}" || rc=1
  # The staged path for comparison: its JSON stays in the temporary directory.
  run benches 60 env OUT="$WORK" STREAMCOMM_CUDA_WINDOW=0 "$BIN/cuda_bench" \
    "${staged_args[@]}" || rc=1
  return $rc
}

echo "gpu-check ($MODE) over $BIN; NVRTC: ${NVRTC:-none found}"
step probe step_probe
if [[ -n $STOP ]]; then
  echo "stopping: this bundle checks NVIDIA's driver, and the CPU stand-in answered" \
       "(remove it from LD_LIBRARY_PATH)"
  SKIPPED=$((SKIPPED + 6))
else
  step memops step_memops
  step reduce step_reduce
  step ipc step_ipc
  step cuda-backend step_backend
  step quickstarts step_quickstarts
  step benches step_benches
fi

if [[ -s "$STREAMCOMM_SKIP_LOG" ]]; then
  echo "tests that skipped in this run:"
  sort "$STREAMCOMM_SKIP_LOG" | uniq -c | sed 's/^/  /'
fi
say "$(($(date +%s) - START)) s in all${OUT:+; logs in $OUT}"
say "$PASSED passed, $FAILED failed, $SKIPPED skipped" | tee -a "$SUMMARY"
((FAILED == 0))
