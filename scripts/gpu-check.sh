#!/usr/bin/env bash
# gpu-check.sh: the GPU checks of streamcomm-gpu, the CUDA backend, the GPU
# quick starts and benchmarks, in one command. The steps themselves are
# scripts/gpu-check-run.sh (read it for the list); this script builds what
# they run, and runs them against the CPU stand-in or bundles them for a GPU
# machine.
#
# usage: scripts/gpu-check.sh --stand-in [--no-build]
#            Runs every step here against the CPU stand-in libcuda
#            (gpu/standin): debug builds, reusing what
#            `cargo test --workspace --all-features` built; the stand-in is put
#            on LD_LIBRARY_PATH as libcuda.so / libcuda.so.1 and must answer,
#            with STREAMCOMM_STANDIN_STRICT=1. A stand-in run checks API use
#            and ordering, not a GPU. Logs under $OUT (default
#            target/debug/gpu-check-out). --no-build runs the binaries an
#            earlier --stand-in collected, without cargo (e.g. again with
#            STREAMCOMM_STANDIN_PROFILE=h200 or CUDA_DEVICE_MAX_CONNECTIONS=1).
#        scripts/gpu-check.sh --prepare DIR
#            Builds a bundle in DIR for a GPU machine without Rust: stripped
#            release test binaries and examples and run.sh (at most 48 MiB;
#            no stand-in in it). There, `bash DIR/run.sh` runs the same steps
#            against NVIDIA's driver, within 8 minutes, writing at most 4 files
#            under $OUT (default DIR/out); without a GPU it says
#            `skipped: no GPU` and exits 0.
#        scripts/gpu-check.sh
#            On a GPU machine with Rust: --prepare into a temporary
#            directory, then run it (logs under $OUT, default
#            target/gpu-check-out).
#
# Both end with the line `gpu-check: N passed, M failed, K skipped`; the exit
# status is 0 when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# The test binaries and examples the steps run, by their cargo target names.
TESTS=(device_stream device_reduce nvrtc_compile cuda)
EXAMPLES=(gpu_quickstart quickstart cuda_allreduce gpu_bench cuda_bench)
MAX_BUNDLE_BYTES=$((48 << 20))

# artifacts JSON_FILE: from cargo's JSON messages (python3, which the
# NVRTC wheel needs anyway), "test|example|other NAME EXECUTABLE" for each
# binary and "so NAME FILE" for each shared library.
artifacts() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact":
        continue
    name = m["target"]["name"]
    for f in m["filenames"]:
        if f.endswith(".so"):
            print("so", name, f)
    if m.get("executable"):
        kind = "test" if m["profile"]["test"] else (
            "example" if "example" in m["target"]["kind"] else "other")
        print(kind, name, m["executable"])
PY
}

# standin_lib JSON_FILE: the stand-in's shared library from cargo's messages.
standin_lib() {
  artifacts "$1" | awk '$1 == "so" && $2 == "streamcomm_cuda_standin" {print $3; exit}'
}

# collect JSON_FILE DIR: links (or copies, with COPY=1) the binaries named
# above from cargo's JSON messages into DIR as test-<name> and <example>.
collect() {
  local json=$1 dir=$2 name exe kind
  local want_tests=" ${TESTS[*]} " want_examples=" ${EXAMPLES[*]} "
  while read -r kind name exe; do
    case $kind in
      test) [[ $want_tests == *" $name "* ]] || continue; name="test-$name" ;;
      example) [[ $want_examples == *" $name "* ]] || continue ;;
      *) continue ;;
    esac
    if [[ ${COPY:-0} == 1 ]]; then cp "$exe" "$dir/$name"; else ln -sf "$exe" "$dir/$name"; fi
  done < <(artifacts "$json")
  local missing=0 n
  for n in "${TESTS[@]/#/test-}" "${EXAMPLES[@]}"; do
    [[ -e "$dir/$n" ]] || { echo "gpu-check: cargo built no $n" >&2; missing=1; }
  done
  return $missing
}

# NVRTC for the kernel steps (it needs no GPU): STREAMCOMM_NVRTC_LIB where
# set, else the pinned wheels in target/nvidia-wheels, installed there on
# first use by scripts/nvrtc-wheels.sh. Where they cannot be installed,
# that script names the command and the kernel steps fail, saying NVRTC is
# missing.
ensure_nvrtc() {
  [[ -n "${STREAMCOMM_NVRTC_LIB:-}" ]] && return 0
  local exports
  if exports=$("$ROOT/scripts/nvrtc-wheels.sh"); then
    eval "$exports"
  else
    echo "gpu-check: no NVRTC: the kernel steps below will fail"
  fi
}

stand_in() {
  local target=${CARGO_TARGET_DIR:-$ROOT/target}
  local json bin ld lib
  bin="$target/debug/gpu-check-bin"
  ld="$target/debug/gpu-check-standin"
  if [[ ${1:-} == --no-build ]]; then
    if [[ ! -e "$ld/libcuda.so.1" || ! -d "$bin" ]]; then
      echo "gpu-check: --no-build: nothing collected yet (run --stand-in once)"
      echo "gpu-check: 0 passed, 1 failed, 0 skipped"
      return 1
    fi
    echo "gpu-check: stand-in $(readlink "$ld/libcuda.so.1") (not rebuilt)"
    run_stand_in "$bin" "$ld"
    return
  fi
  json=$(mktemp)
  # The same command line as the README's test run, so nothing is rebuilt
  # after it; examples come with `cargo test`.
  if ! cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
      >"$json"; then
    rm -f "$json"
    echo "gpu-check: build failed"
    echo "gpu-check: 0 passed, 1 failed, 0 skipped"
    return 1
  fi
  rm -rf "$bin" "$ld"
  mkdir -p "$bin" "$ld"
  lib=$(standin_lib "$json")
  if ! collect "$json" "$bin" || [[ ! -f "$lib" ]]; then
    rm -f "$json"
    echo "gpu-check: the build lacks a binary (or the stand-in library)"
    echo "gpu-check: 0 passed, 1 failed, 0 skipped"
    return 1
  fi
  rm -f "$json"
  ln -sf "$lib" "$ld/libcuda.so"
  ln -sf "$lib" "$ld/libcuda.so.1"
  echo "gpu-check: stand-in $lib"
  run_stand_in "$bin" "$ld"
}

# run_stand_in BIN LD: the steps over the binaries in BIN, with the
# stand-in's libcuda links in LD first on LD_LIBRARY_PATH.
run_stand_in() {
  local bin=$1 ld=$2
  local target=${CARGO_TARGET_DIR:-$ROOT/target}
  ensure_nvrtc
  LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPU_CHECK_MODE=stand-in \
    GPU_CHECK_BIN="$bin" GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-300}" \
    GPU_CHECK_BENCH_RESERVE="${GPU_CHECK_BENCH_RESERVE:-120}" \
    OUT="${OUT:-$target/debug/gpu-check-out}" \
    bash "$ROOT/scripts/gpu-check-run.sh"
}

prepare() {
  local dir=$1 json
  [[ -n "$dir" ]] || { echo "usage: $0 --prepare DIR" >&2; return 2; }
  rm -rf "$dir" && mkdir -p "$dir" || return 1
  json=$(mktemp)
  local tests=() t
  for t in "${TESTS[@]}"; do tests+=(--test "$t"); done
  if ! { cargo test --release -p streamcomm-gpu -p streamcomm "${tests[@]}" --no-run \
           --message-format=json-render-diagnostics &&
         cargo build --release -p streamcomm-gpu --example gpu_bench --example kernel_cache \
           -p streamcomm-examples --example gpu_quickstart --example quickstart \
           --example cuda_allreduce --example cuda_bench \
           --message-format=json-render-diagnostics; } >"$json"; then
    rm -f "$json"
    echo "gpu-check: release build failed" >&2
    return 1
  fi
  COPY=1 collect "$json" "$dir" || { rm -f "$json"; return 1; }
  local kernel_cache
  kernel_cache=$(artifacts "$json" | awk '$1 == "example" && $2 == "kernel_cache" {print $3; exit}')
  rm -f "$json"
  strip "$dir"/* || return 1
  cp "$ROOT/scripts/gpu-check-run.sh" "$dir/run.sh"
  cp "$ROOT/scripts/torch-nccl-baseline.py" "$dir/torch-nccl-baseline.py"
  if compgen -G "$dir/*standin*" >/dev/null || compgen -G "$dir/*.so*" >/dev/null; then
    echo "gpu-check: the bundle must not contain the stand-in" >&2
    return 1
  fi
  # sm_90 kernels compiled here (NVRTC only, no GPU), for a GPU machine
  # without NVRTC: run.sh copies kernels/ into its kernel cache.
  local rc=0
  [[ -x "$kernel_cache" ]] || { echo "gpu-check: cargo built no kernel_cache" >&2; return 1; }
  ensure_nvrtc
  "$kernel_cache" --arch sm_90 "$dir/kernels" || rc=$?
  case $rc in
    0) echo "gpu-check: kernels/: $(du -sb "$dir/kernels" | cut -f1) bytes of sm_90 kernels" ;;
    3) rm -rf "$dir/kernels"
       echo "gpu-check: no NVRTC here, so no precompiled kernels in the bundle" \
            "(the GPU machine needs its own NVRTC)" ;;
    *) echo "gpu-check: precompiling the kernels failed" >&2; return 1 ;;
  esac
  local bytes
  bytes=$(du -sb "$dir" | cut -f1)
  ls -l "$dir"
  echo "gpu-check: bundle $dir: $bytes bytes (limit $MAX_BUNDLE_BYTES)"
  ((bytes <= MAX_BUNDLE_BYTES)) || { echo "gpu-check: the bundle is too large" >&2; return 1; }
}

case "${1:-}" in
  --stand-in)
    [[ -z "${2:-}" || $2 == --no-build ]] ||
      { echo "usage: $0 --stand-in [--no-build]" >&2; exit 2; }
    stand_in "${2:-}" ;;
  --prepare) prepare "${2:-}" ;;
  "")
    tmp=$(mktemp -d)
    prepare "$tmp" && OUT="${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/gpu-check-out}" bash "$tmp/run.sh"
    rc=$?
    rm -rf "$tmp"
    exit $rc ;;
  *) echo "usage: $0 [--stand-in [--no-build] | --prepare DIR]" >&2; exit 2 ;;
esac
