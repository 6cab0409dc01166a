#!/usr/bin/env bash
# gpu-check.sh: the GPU checks of streamcomm-gpu and the CUDA backend, in one command, for a machine
# with an NVIDIA GPU.
#
# usage: scripts/gpu-check.sh            run the checks (see below)
#        scripts/gpu-check.sh --prepare  build the release test binaries and
#                                        examples into .gpu-check-bin/ (stripped;
#                                        no GPU needed) for a GPU machine without
#                                        Rust: carry .gpu-check-bin there and run
#                                        the script; without cargo it uses them
#
# 1. looks for a GPU (nvidia-smi, else a loadable libcuda.so.1); without one it
#    prints "skipped: no GPU" and exits 0;
# 2. looks for NVRTC (STREAMCOMM_NVRTC_LIB, the CUDA toolkit, the PyPI wheel,
#    ldconfig) and exports STREAMCOMM_NVRTC_LIB when it finds one;
# 3. builds the crate's tests and benchmark (release);
# 4. runs every test of streamcomm-gpu with STREAMCOMM_REQUIRE_GPU=1, so a test
#    that cannot reach the GPU fails instead of skipping;
#    and the CUDA backend's tests (core/tests/cuda/: every collective and
#    dtype with 2 and 4 ranks on one GPU, a captured step replayed 1000 times);
# 5. runs the GPU quick starts (examples/examples/gpu_quickstart.rs, which must
#    print OK, and the main quick start with 2 ranks, which must say it used
#    the CUDA backend and print OK);
# 6. runs the benchmark example gpu_bench (reduce kernel vs d2d copy bandwidth
#    at 256 MiB, doorbell round-trip latency on both signal paths) and the CUDA
#    backend's cuda_bench (2 ranks on one GPU: stream barrier p50/p99/p99.9,
#    plain and graph-replayed; all_reduce 8 B..256 MiB algbw/busbw vs d2d copy)
#    on the direct path, then on the staged path up to 16 MiB for comparison.
#
# Prints a summary table last. When $OUT is set, full logs go to
# $OUT/gpu-check/*.log and the benchmark's JSON to $OUT/gpu-check/gpu_bench.json.
# Every step has a timeout; the whole run stays under 6 minutes (build 180 s,
# tests 120 s + 150 s, quick starts 20 s + 60 s, benches 30 s + 90 s + 60 s; the limits are
# ceilings, a healthy run takes about half). Exit status: 0 when every step passed (or no GPU),
# 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=.gpu-check-bin
if [[ "${1:-}" == --prepare ]]; then
  set -e
  rm -rf "$BIN" && mkdir -p "$BIN"
  { cargo test --release -p streamcomm-gpu --no-run --message-format=json 2>/dev/null
    cargo test --release -p streamcomm --test cuda --no-run --message-format=json 2>/dev/null; } |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
           | "\(.target.name) \(.executable)"' |
    while read -r name exe; do cp "$exe" "$BIN/test-$name"; done
  cargo build --release -p streamcomm-gpu --example gpu_bench
  cargo build --release -p streamcomm-examples --example gpu_quickstart --example quickstart \
    --example cuda_bench
  cp target/release/examples/gpu_bench target/release/examples/gpu_quickstart \
     target/release/examples/quickstart target/release/examples/cuda_bench "$BIN/"
  strip "$BIN"/* 2>/dev/null || true
  ls -l "$BIN"
  du -sh "$BIN"
  exit 0
fi

if [[ -n "${OUT:-}" ]]; then LOGS="$OUT/gpu-check"; else LOGS="$(mktemp -d)"; fi
mkdir -p "$LOGS" "$LOGS/staged"
START=$(date +%s)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L | tee "$LOGS/gpus.log"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$LOGS/gpus.log"
elif ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  echo "no nvidia-smi, but libcuda.so.1 is installed: trying" | tee "$LOGS/gpus.log"
else
  echo "skipped: no GPU (no working nvidia-smi and no libcuda.so.1 on this machine)"
  exit 0
fi

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
if [[ -n "$NVRTC" ]]; then
  export STREAMCOMM_NVRTC_LIB="$NVRTC"
  echo "NVRTC: $NVRTC"
else
  echo "NVRTC: none found (the kernel tests will fail; set STREAMCOMM_NVRTC_LIB)"
fi
export STREAMCOMM_KERNEL_CACHE="$LOGS/kernel-cache"
export STREAMCOMM_REQUIRE_GPU=1
export CARGO_TERM_COLOR=never

declare -a NAMES STATUS SECS
step() { # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0 rc
  t0=$(date +%s)
  printf '\n=== %s (limit %ss)\n' "$name" "$limit"
  timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  tail -n 40 "$LOGS/$name.log"
  NAMES+=("$name"); SECS+=("$(( $(date +%s) - t0 ))")
  case $rc in
    0) STATUS+=("ok") ;;
    124|137) STATUS+=("TIMEOUT") ;;
    *) STATUS+=("FAILED rc=$rc") ;;
  esac
  return $rc
}

if command -v cargo >/dev/null 2>&1; then
  if step build 180 bash -c 'cargo test --release -p streamcomm-gpu --no-run &&
      cargo build --release -p streamcomm-gpu --example gpu_bench &&
      cargo test --release -p streamcomm --test cuda --no-run &&
      cargo build --release -p streamcomm-examples --example gpu_quickstart --example quickstart \
        --example cuda_bench'; then
    step tests 120 cargo test --release --no-fail-fast -p streamcomm-gpu -- --test-threads=2
    step cuda-backend 150 cargo test --release -p streamcomm --test cuda -- --test-threads=1
    step quickstart 20 bash -c 'cargo run --release -q -p streamcomm-examples --example gpu_quickstart | tee /dev/stderr | grep -qx OK'
    step quickstart-2r 60 bash -c 'target/release/examples/quickstart 2 | tee /dev/stderr | grep -q "backend: CUDA" &&
        target/release/examples/quickstart 2 | grep -qx OK'
    step bench 30 env OUT="$LOGS" cargo run --release -q -p streamcomm-gpu --example gpu_bench
    step cuda-bench 90 env OUT="$LOGS" target/release/examples/cuda_bench 2
    step cuda-bench-staged 60 env OUT="$LOGS/staged" STREAMCOMM_CUDA_WINDOW=0 \
      target/release/examples/cuda_bench 2 16777216
  else
    echo "build failed; on a machine without crates.io, run '$0 --prepare' elsewhere and carry $BIN"
  fi
elif [[ -d "$BIN" ]]; then
  echo "no cargo here: running the binaries prepared in $BIN"
  step tests 180 bash -c 'rc=0; for t in '"$BIN"'/test-*; do echo "--- $t"; "$t" --test-threads=1 || rc=1; done; exit $rc'
  step quickstart 20 bash -c "$BIN/gpu_quickstart | tee /dev/stderr | grep -qx OK"
  step quickstart-2r 60 bash -c "$BIN/quickstart 2 | tee /dev/stderr | grep -q 'backend: CUDA'"
  step bench 30 env OUT="$LOGS" "$BIN/gpu_bench"
  step cuda-bench 90 env OUT="$LOGS" "$BIN/cuda_bench" 2
  step cuda-bench-staged 60 env OUT="$LOGS/staged" STREAMCOMM_CUDA_WINDOW=0 "$BIN/cuda_bench" 2 16777216
else
  echo "no cargo and no $BIN: run 'scripts/gpu-check.sh --prepare' on a machine with Rust and carry $BIN"
  exit 1
fi

printf '\n=== summary (%ss in all; logs in %s)\n' "$(( $(date +%s) - START ))" "$LOGS"
if [[ -f "$LOGS/tests.log" ]]; then
  grep -E '^test .* \.\.\. |^test result' "$LOGS/tests.log" | grep -vE '\.\.\. ok$' | sed 's/^/  /'
fi
if [[ -f "$LOGS/bench.log" ]]; then sed -n '/256 MiB/,$p' "$LOGS/bench.log"; echo; fi
if [[ -f "$LOGS/cuda-bench.log" ]]; then cat "$LOGS/cuda-bench.log"; echo; fi
if [[ -f "$LOGS/cuda-bench-staged.log" ]]; then cat "$LOGS/cuda-bench-staged.log"; echo; fi
printf '%-18s %-16s %s\n' step status seconds
FAIL=0
for i in "${!NAMES[@]}"; do
  printf '%-18s %-16s %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
  [[ "${STATUS[$i]}" == ok ]] || FAIL=1
done
exit $FAIL
