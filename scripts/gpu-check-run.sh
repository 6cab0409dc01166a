#!/usr/bin/env bash
# gpu-check-run.sh: the steps of the GPU check, over binaries built
# beforehand. scripts/gpu-check.sh copies it into a prepared bundle as
# run.sh (the binaries beside it), and runs it itself for --stand-in.
#
# usage: bash run.sh                 on the GPU machine: NVIDIA's driver only
#        GPU_CHECK_MODE=stand-in GPU_CHECK_BIN=DIR bash gpu-check-run.sh
#                                    (what `gpu-check.sh --stand-in` does: the
#                                    CPU stand-in libcuda on LD_LIBRARY_PATH,
#                                    STREAMCOMM_STANDIN_STRICT=1)
#
# The binaries (in GPU_CHECK_BIN, default this script's directory):
#   test-device_stream test-device_reduce test-nvrtc_compile   (streamcomm-gpu)
#   test-cuda                                                  (the CUDA backend)
#   gpu_quickstart quickstart cuda_allreduce gpu_bench cuda_bench   (examples)
#
# Steps, in order, each under its own timeout, all of them within
# GPU_CHECK_BUDGET seconds (default 450, so that a verdict comes within 8
# minutes even when steps hang: a step past its timeout ends as TIMEOUT, and
# every later step's timeout is cut to what is left of the budget):
#   1 probe        which driver answered (it must be NVIDIA's on a GPU run, the
#                  stand-in's under --stand-in) and its compute mode, then
#                  every kernel through NVRTC (on the stand-in, the test run
#                  it reuses did that)
#   2 quickstarts  gpu_quickstart, the main quick start (2 ranks) and
#                  cuda_allreduce (2 ranks, cudarc buffers), each checked for
#                  its OK line (the quick start for the CUDA backend too)
#   3 memops       doorbells, stream memory operations, host functions, capture
#   4 reduce       the reduce kernels against a CPU reference
#   5 ipc          CUDA IPC between two processes
#   6 cuda-backend the CUDA backend's tests, --test-threads=1 --nocapture
#   7 sanitizer    compute-sanitizer's memcheck and racecheck over the reduce
#                  kernels' tests, where a CUDA toolkit provides it (skipped
#                  where none is found, or where it cannot run here)
#   8 benches      gpu_bench and cuda_bench (direct, then staged): the
#                  measurements, last; steps 1 to 7 may not use the
#                  GPU_CHECK_BENCH_RESERVE seconds (default 210) kept for them
#   9 torch-nccl   where PyTorch with NCCL sees at least 2 GPUs: its NCCL
#                  all_reduce and barrier on every GPU (torch-nccl-baseline.py
#                  beside this script), then cuda_bench with as many ranks,
#                  one per GPU, in the same run (skipped, saying why, where
#                  there is no PyTorch, no NCCL or one GPU: there the
#                  yardstick is gpu_bench's device-to-device copy)
# A verdict line per step, then `gpu-check: N passed, M failed, K skipped`.
# When the GPU's compute mode is EXCLUSIVE_PROCESS (or PROHIBITED), what
# needs several processes on one GPU (ipc, the CUDA backend's multi-process
# tests, the 2-rank quick starts, cuda_bench) is skipped, saying why.
#
# Files: at most 6, under $OUT (default: out/ beside this script, so in a
# bundle DIR/out/): gpu-check.log (every step's output), summary.txt (the
# machine's facts, the verdicts, what was not tested), gpu_bench.json,
# cuda_bench.json, and where step 9 ran torch_nccl.json and
# cuda_bench_per_gpu.json; a run first removes those of an earlier run. The kernel
# cache goes to a temporary directory, never under $OUT. Exit status 0 when
# every step passed (or when there is no GPU at all), 1 otherwise.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${GPU_CHECK_BIN:-$HERE}
MODE=${GPU_CHECK_MODE:-gpu}
BUDGET=${GPU_CHECK_BUDGET:-450}
BENCH_RESERVE=${GPU_CHECK_BENCH_RESERVE:-210}
((BENCH_RESERVE > BUDGET / 2)) && BENCH_RESERVE=$((BUDGET / 2))
START=$(date +%s)

say() { printf 'gpu-check: %s\n' "$*"; }

# No GPU, no stand-in: say so at once (no binary has to load a driver).
# A CUDA toolkit's stubs/ directory holds a libcuda.so (and no libcuda.so.1)
# whose every call fails: a link-time stub, not a driver, so it does not
# count (the probe names it too, when it is what a program would load).
STUB_ONLY=
has_libcuda() {
  local d dirs=()
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  # ${a[@]+"${a[@]}"}: an empty array under set -u on bash before 4.4.
  for d in ${dirs[@]+"${dirs[@]}"}; do
    [[ -n "$d" ]] || continue
    [[ -e "$d/libcuda.so.1" ]] && return 0
    if [[ -e "$d/libcuda.so" ]]; then
      [[ "${d%/}" == */stubs ]] && { STUB_ONLY="$d/libcuda.so"; continue; }
      return 0
    fi
  done
  ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '
}
if ! has_libcuda; then
  echo "skipped: no GPU (no libcuda.so.1 or libcuda.so on this machine${STUB_ONLY:+; $STUB_ONLY is the link-time stub of a CUDA toolkit, not a driver})"
  say "0 passed, 0 failed, 8 skipped"
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=${OUT:-$HERE/out}
if ! mkdir -p "$OUT" 2>/dev/null || [[ ! -w "$OUT" ]]; then
  echo "gpu-check: cannot write to $OUT; logs go to $WORK and are removed at the end" >&2
  OUT=$WORK
fi
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu-check.log"
SUMMARY="$OUT/summary.txt"
rm -f "$OUT/gpu_bench.json" "$OUT/cuda_bench.json" "$OUT/torch_nccl.json" "$OUT/cuda_bench_per_gpu.json"
: >"$LOG"
: >"$SUMMARY"

export STREAMCOMM_REQUIRE_GPU=1
export STREAMCOMM_KERNEL_CACHE="$WORK/kernel-cache"
# A bundle's precompiled kernels (kernels/, sm_90, from gpu-check.sh
# --prepare): loaded from the cache, they need no NVRTC on this machine.
if compgen -G "$HERE/kernels/*.cubin" >/dev/null; then
  mkdir -p "$STREAMCOMM_KERNEL_CACHE" && cp "$HERE"/kernels/*.cubin "$STREAMCOMM_KERNEL_CACHE/"
fi
# Skips of this run are counted here, not in a caller's skip log.
export STREAMCOMM_SKIP_LOG="$WORK/skips.txt"
export RUST_BACKTRACE=1
# The stand-in aborts a process that calls the driver from a CUDA callback
# thread (host functions, stream callbacks), which NVIDIA's driver forbids.
[[ $MODE == stand-in ]] && export STREAMCOMM_STANDIN_STRICT=1

find_nvrtc() {
  if [[ -n "${STREAMCOMM_NVRTC_LIB:-}" ]]; then echo "$STREAMCOMM_NVRTC_LIB"; return; fi
  local c
  for c in /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib64/libnvrtc.so.12 \
           /usr/local/cuda/lib64/libnvrtc.so /usr/local/cuda-*/lib64/libnvrtc.so.1[23]; do
    [[ -e "$c" ]] && { echo "$c"; return; }
  done
  # PyPI wheels: CUDA 12 puts it in nvidia/cuda_nvrtc/lib, CUDA 13 in nvidia/cu13/lib.
  c=$(timeout 20 python3 -c 'import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [h for v in ("13", "12") for d in dirs for h in sorted(glob.glob(d + "/nvidia/**/libnvrtc.so." + v, recursive=True))]
print(hits[0] if hits else "")' 2>/dev/null)
  [[ -n "$c" ]] && { echo "$c"; return; }
  ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.1[23] /{print $NF; exit}'
}
NVRTC=$(find_nvrtc)
if [[ -n "$NVRTC" ]]; then export STREAMCOMM_NVRTC_LIB="$NVRTC"; fi

# nvrtc_version LIB: nvrtcVersion() through python3's ctypes where python3
# is, else what the library's file name says.
nvrtc_version() {
  local lib=$1 real v
  real=$(readlink -f "$lib" 2>/dev/null || echo "$lib")
  if command -v python3 >/dev/null 2>&1; then
    v=$(timeout 20 python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
major, minor = ctypes.c_int(), ctypes.c_int()
if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0:
    print("%d.%d" % (major.value, minor.value))' "$lib" 2>/dev/null)
    [[ -n "$v" ]] && { echo "nvrtcVersion $v (file $real)"; return; }
    v="python3 could not call nvrtcVersion"
  else
    v="no python3 to call nvrtcVersion"
  fi
  case ${real##*/} in
    libnvrtc.so.*) echo "${real##*/libnvrtc.so.} by its file name $real ($v)" ;;
    *) echo "unknown (file $real)" ;;
  esac
}

# smi_facts: what `nvidia-smi -q` says of the driver and the first GPU.
smi_facts() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi: not on this machine"
    return
  fi
  local q
  if ! q=$(timeout 20 nvidia-smi -q 2>&1); then
    echo "nvidia-smi -q failed: $(head -n 1 <<<"$q")"
    return
  fi
  awk '
    function key(  k) { k = $0; sub(/ *:.*$/, "", k); sub(/^ +/, "", k); return k }
    function val(  v) { v = $0; sub(/^[^:]*: */, "", v); return v }
    function once(name, v) { if (!(name in seen)) { seen[name] = 1; print name ": " v } }
    { k = key() }
    k == "MIG Mode" && index($0, ":") == 0 { mig = 1; next }
    k == "MIG Mode" { once("MIG mode", val()); next }
    mig && k == "Current" { once("MIG mode", val()); mig = 0; next }
    k == "Driver Version" { once("driver version", val()) }
    k == "CUDA Version" { once("CUDA version", val()) }
    k == "Attached GPUs" { once("GPUs", val()) }
    k == "Product Name" { once("GPU 0", val()) }
    k == "Persistence Mode" { once("persistence mode", val()) }
    k == "Compute Mode" { once("compute mode", val()) }
  ' <<<"$q" | sed 's/^/nvidia-smi: /'
  mps_state
}

# mps_state: whether an MPS control daemon runs (nvidia-smi -q does not say).
mps_state() {
  local p
  for p in /proc/[0-9]*/comm; do
    case $(cat "$p" 2>/dev/null) in
      nvidia-cuda-mps*)
        echo "MPS: a daemon runs (nvidia-cuda-mps-*): processes share the GPU through it"
        return ;;
    esac
  done
  echo "MPS: no MPS daemon runs${CUDA_MPS_PIPE_DIRECTORY:+ (CUDA_MPS_PIPE_DIRECTORY is set)}"
}

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

# Seconds of the budget that a command may not use (the benches' share,
# while the probe runs).
RESERVE=0

# run STEP LIMIT_S COMMAND...: one command of a step, its output appended to
# the log (and echoed after it ends); the step's timeout, cut to what is left
# of the budget less RESERVE. Returns the command's status (124 on a timeout).
run() {
  local step=$1 limit=$2; shift 2
  local left=$((BUDGET - RESERVE - ($(date +%s) - START)))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    echo "[$step] not started: the run's $BUDGET s budget is spent" | tee -a "$LOG"
    CUT=1
    return 124
  fi
  printf '\n=== [%s] %s (limit %ss)\n' "$step" "$*" "$limit" >>"$LOG"
  local before rc t0
  before=$(wc -l <"$LOG")
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  ((rc == 137)) && rc=124
  ((rc == 124)) && CUT=1
  if ((rc == 124)); then
    echo "[$step] TIMEOUT after ${limit}s" >>"$LOG"
  else
    echo "[$step] exit status $rc after $(($(date +%s) - t0)) s" >>"$LOG"
  fi
  tail -n +"$((before + 1))" "$LOG" | tail -n "${TAIL:-40}"
  return $rc
}

# step STEP COMMAND...: runs a shell function as one step and prints its verdict.
step() {
  local name=$1; shift
  local t0 rc status
  t0=$(date +%s)
  printf '\n=== step %s\n' "$name"
  CUT=
  "$@"
  rc=$?
  # A step whose command the budget cut (or never started) is TIMEOUT,
  # whatever status its function made of that.
  [[ -n $CUT && $rc != 0 ]] && rc=124
  case $rc in
    0) status=ok ;;
    124) status=TIMEOUT ;;
    77) status=skipped ;;
    *) status=FAILED ;;
  esac
  verdict "$name" "$status" "$(($(date +%s) - t0)) s${DETAIL:+; $DETAIL}"
  DETAIL=
}
DETAIL=
STOP=
# Set by the benches when cuda_bench ran one rank per GPU.
PER_GPU=
# Set by the probe when the GPU takes one process at a time: why the steps
# that need several processes on one GPU are skipped.
ONE_PROCESS=

# skip STEP WHY: a step that does not run.
skip() {
  printf '\n=== step %s\n' "$1"
  verdict "$1" skipped "$2"
}

need() { # need BINARY: fails the step when a binary is missing
  [[ -x "$BIN/$1" ]] && return 0
  echo "missing binary $BIN/$1" | tee -a "$LOG"
  return 1
}

# The compute mode, from the probe's `compute mode: NAME` line, else from
# nvidia-smi (Default, Exclusive_Process, Prohibited), in the probe's words.
COMPUTE_MODE=
one_process_reason() {
  case $COMPUTE_MODE in
    EXCLUSIVE_PROCESS | EXCLUSIVE_THREAD) echo "compute mode $COMPUTE_MODE: one process per GPU" ;;
    PROHIBITED) echo "compute mode PROHIBITED: no process may use the GPU" ;;
  esac
}

step_probe() {
  need test-device_stream && need test-nvrtc_compile || return 1
  local out rc
  out=$(TAIL=200 run probe 30 "$BIN/test-device_stream" the_driver_answers_and_names_itself \
    --exact --nocapture --test-threads=1)
  rc=$?
  echo "$out"
  local driver mode
  driver=$(grep -m1 '^driver: ' <<<"$out" | sed 's/^driver: //')
  mode=$(grep -m1 '^compute mode: ' <<<"$out" | sed 's/^compute mode: //')
  [[ -n "$mode" ]] && COMPUTE_MODE=$mode
  {
    echo "probe: driver: ${driver:-none answered}"
    echo "probe: compute mode: ${mode:-not printed by the probe}"
  } >>"$SUMMARY"
  ONE_PROCESS=$(one_process_reason)
  ((rc == 0)) && [[ -n "$driver" ]] || { DETAIL="no driver answered"; return 1; }
  DETAIL="driver: $driver"
  [[ -n "$ONE_PROCESS" ]] && DETAIL="$DETAIL; $ONE_PROCESS"
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
  if [[ -z "$NVRTC" ]]; then
    if compgen -G "$HERE/kernels/*.cubin" >/dev/null; then
      DETAIL="$DETAIL; no NVRTC here: the bundle's precompiled kernels only"
      return 0
    fi
    DETAIL="$DETAIL; no NVRTC (set STREAMCOMM_NVRTC_LIB)"
    return 1
  fi
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

# compute-sanitizer of a CUDA toolkit (the driver alone has none).
find_sanitizer() {
  local c
  c=$(command -v compute-sanitizer 2>/dev/null) && { echo "$c"; return; }
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -x "$c" ]] && { echo "$c"; return; }
  done
}

# memcheck, then racecheck, over the reduce kernels' tests. The tool's
# --error-exitcode (3) marks what it found in the kernels; any other
# failure of the tool to run (a sandbox that refuses its attach, a driver
# it does not support) skips the step, saying so (status 77).
step_sanitizer() {
  need test-device_reduce || return 1
  local tool rc
  for tool in memcheck racecheck; do
    run sanitizer 90 "$SANITIZER" --tool "$tool" --error-exitcode 3 \
      "$BIN/test-device_reduce" --test-threads=1
    rc=$?
    case $rc in
      0) ;;
      3) DETAIL="$tool found errors in the kernels"; return 1 ;;
      124) return 124 ;;
      101) DETAIL="$tool: the tests failed under it"; return 1 ;;
      *) DETAIL="compute-sanitizer could not run here ($tool: status $rc)"; return 77 ;;
    esac
  done
  DETAIL="memcheck and racecheck clean ($SANITIZER)"
}

step_ipc() {
  need test-device_stream || return 1
  run ipc 30 "$BIN/test-device_stream" ipc_handle_shares_memory_with_a_child_process \
    --exact --nocapture --test-threads=1
}

# The CUDA backend's tests that start several processes on GPU 0 (as
# libtest --skip filters); the others are ranks as threads or one rank.
MULTI_PROCESS_TESTS=(
  every_collective_and_dtype_on_one_gpu a_captured_step_replays_with_fresh_data
  a_group_exchanges_around_a_ring_on_one_gpu bad_arguments_fail_at_enqueue
  a_peer_that_aborts_releases a_dead_peer_releases one_rank_with_another_window
  reductions_over_nine_ranks gather_scatter_all_to_allv_and_all_gatherv_on_one_gpu
  a_cuda_comm_on_a_split_group a_graph_dropped_just_before kernels_that_do_not_load
  a_cudarc_nccl_program_runs
)

step_backend() {
  need test-cuda || return 1
  # On the stand-in, two devices: ranks as threads need one each (the
  # panicking-rank test); on a GPU machine with one GPU that test skips.
  local env_args=(env) skips=() t
  [[ $MODE == stand-in ]] && env_args+=(STREAMCOMM_STANDIN_DEVICES=2)
  if [[ -n "$ONE_PROCESS" ]]; then
    for t in "${MULTI_PROCESS_TESTS[@]}"; do skips+=(--skip "$t"); done
    DETAIL="multi-process tests skipped: $ONE_PROCESS"
  fi
  run cuda-backend 150 "${env_args[@]}" "$BIN/test-cuda" ${skips[@]+"${skips[@]}"} \
    --test-threads=1 --nocapture
}

step_quickstarts() {
  need gpu_quickstart && need quickstart && need cuda_allreduce || return 1
  local out rc=0
  out=$(TAIL=200 run quickstarts 30 "$BIN/gpu_quickstart") || rc=1
  echo "$out"
  grep -qx OK <<<"$out" || { echo "gpu_quickstart did not print OK" | tee -a "$LOG"; rc=1; }
  if [[ -n "$ONE_PROCESS" ]]; then
    DETAIL="the 2-rank quick starts skipped: $ONE_PROCESS"
    return $rc
  fi
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
  local rc=0 r
  # The stand-in moves bytes with the CPU: smaller sizes keep the step short.
  local gpu_args=() cuda_args=(2) staged_args=(2 16777216)
  if [[ $MODE == stand-in ]]; then
    gpu_args=(4194304); cuda_args=(2 4194304); staged_args=(2 1048576)
  fi
  run benches 60 env OUT="$OUT" "$BIN/gpu_bench" ${gpu_args[@]+"${gpu_args[@]}"}
  r=$?; ((r == 0)) || rc=$r
  if [[ -n "$ONE_PROCESS" ]]; then
    DETAIL="cuda_bench skipped: $ONE_PROCESS"
    return $rc
  fi
  run benches 90 env OUT="$OUT" "$BIN/cuda_bench" "${cuda_args[@]}"
  r=$?; ((r == 0)) || rc=$r
  # The staged path for comparison: its JSON stays in the temporary directory.
  run benches 60 env OUT="$WORK" STREAMCOMM_CUDA_WINDOW=0 "$BIN/cuda_bench" \
    "${staged_args[@]}"
  r=$?; ((r == 0)) || rc=$r
  # cuda_bench puts one rank on each GPU where there are enough, and says so.
  if grep -q "rank r on GPU r: this measures the interconnect" "$LOG"; then
    PER_GPU=1
    DETAIL="one rank per GPU: cuda_bench measures the interconnect"
  else
    DETAIL="ranks as processes on one GPU: cuda_bench measures context switching, not an interconnect"
  fi
  return $rc
}

# PyTorch's NCCL on every GPU, then streamcomm over as many ranks, one per
# GPU: the baseline and our figure from one run (skipped, saying why, where
# PyTorch, its NCCL or a second GPU is missing).
step_torch() {
  local reason gpus rc=0 r
  command -v python3 >/dev/null || { DETAIL="no python3 here"; return 77; }
  reason=$(timeout 60 python3 "$HERE/torch-nccl-baseline.py" --check 2>&1)
  r=$?
  if ((r != 0)); then
    DETAIL=$(tail -n1 <<<"$reason")
    ((r == 77)) && return 77
    return 1
  fi
  gpus=$reason
  local max=() cuda_args=("$gpus")
  if [[ $MODE == stand-in ]]; then max=(4194304); cuda_args+=(4194304); fi
  run torch-nccl 120 env OUT="$OUT" python3 "$HERE/torch-nccl-baseline.py" \
    ${max[@]+"${max[@]}"}
  r=$?; ((r == 0)) || rc=$r
  need cuda_bench || return 1
  mkdir -p "$WORK/per-gpu"
  run torch-nccl 120 env OUT="$WORK/per-gpu" "$BIN/cuda_bench" "${cuda_args[@]}"
  r=$?; ((r == 0)) || rc=$r
  [[ -f "$WORK/per-gpu/cuda_bench.json" ]] &&
    cp "$WORK/per-gpu/cuda_bench.json" "$OUT/cuda_bench_per_gpu.json"
  DETAIL="$gpus GPUs, one rank each: torch's NCCL, then streamcomm"
  return $rc
}

{
  echo "gpu-check ($MODE) $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname 2>/dev/null || echo '?'), over $BIN"
  [[ -n "${STREAMCOMM_STANDIN_PROFILE:-}" ]] && echo "STREAMCOMM_STANDIN_PROFILE=$STREAMCOMM_STANDIN_PROFILE"
  [[ -n "${STREAMCOMM_STANDIN_STRICT:-}" ]] && echo "STREAMCOMM_STANDIN_STRICT=$STREAMCOMM_STANDIN_STRICT"
  [[ -n "${CUDA_DEVICE_MAX_CONNECTIONS:-}" ]] && echo "CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS"
  smi_facts
  if [[ -n "$NVRTC" ]]; then
    echo "NVRTC: $NVRTC, $(nvrtc_version "$NVRTC")"
  else
    echo "NVRTC: none found (set STREAMCOMM_NVRTC_LIB)$(compgen -G "$HERE/kernels/*.cubin" \
      >/dev/null && echo "; the bundle's precompiled kernels/ are used")"
  fi
} >>"$SUMMARY"
# Where the probe prints no compute mode: nvidia-smi's, in the probe's words.
COMPUTE_MODE=$(sed -n 's/^nvidia-smi: compute mode: //p' "$SUMMARY" | tr '[:lower:]' '[:upper:]')
ONE_PROCESS=$(one_process_reason)
cat "$SUMMARY"

echo "gpu-check ($MODE) over $BIN; NVRTC: ${NVRTC:-none found}"
# Steps by what they tell, the measurements last with their time kept.
RESERVE=$BENCH_RESERVE
step probe step_probe
if [[ -n $STOP ]]; then
  echo "stopping: this bundle checks NVIDIA's driver, and the CPU stand-in answered" \
       "(remove it from LD_LIBRARY_PATH)"
  SKIPPED=$((SKIPPED + 8))
else
  step quickstarts step_quickstarts
  step memops step_memops
  step reduce step_reduce
  if [[ -n "$ONE_PROCESS" ]]; then skip ipc "$ONE_PROCESS"; else step ipc step_ipc; fi
  step cuda-backend step_backend
  SANITIZER=$(find_sanitizer)
  if [[ $MODE == stand-in ]]; then
    skip sanitizer "the stand-in is no GPU: compute-sanitizer needs NVIDIA's driver"
  elif [[ -z "$SANITIZER" ]]; then
    skip sanitizer "no compute-sanitizer here (it comes with a CUDA toolkit, not the driver)"
  else
    step sanitizer step_sanitizer
  fi
  RESERVE=0
  step benches step_benches
  if [[ $MODE == stand-in ]]; then
    skip torch-nccl "the stand-in is no GPU: PyTorch's NCCL needs NVIDIA's driver"
  else
    step torch-nccl step_torch
  fi
fi

if [[ -s "$STREAMCOMM_SKIP_LOG" ]]; then
  echo "tests that skipped in this run:"
  sort "$STREAMCOMM_SKIP_LOG" | uniq -c | sed 's/^/  /'
fi
{
  if [[ -n "$PER_GPU" ]]; then
    echo "what cuda_bench measures: one rank per GPU, the interconnect between them"
  elif [[ -z "$ONE_PROCESS" ]]; then
    echo "what cuda_bench measures: every rank on GPU 0, ranks" \
      "as processes sharing one GPU: context switching on one GPU, not an interconnect"
  fi
  several="several GPUs, NVLink/NVSwitch, "
  [[ -n "$PER_GPU" ]] && several=
  echo "not tested: ${several}GPUDirect RDMA with a NIC," \
       "multi-node jobs${ONE_PROCESS:+, several processes on one GPU ($ONE_PROCESS)}"
  [[ $MODE == stand-in ]] && echo "not tested on the stand-in: a GPU's memory model," \
       "timing, or the CUDA C kernels' code"
} >>"$SUMMARY"
say "$(($(date +%s) - START)) s in all; logs in $OUT"
say "$PASSED passed, $FAILED failed, $SKIPPED skipped" | tee -a "$SUMMARY"
((FAILED == 0))
