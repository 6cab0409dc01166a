#!/usr/bin/env bash
# check-cudarc-consumers.sh: streamcomm builds inside programs whose cudarc
# 0.19 has another linking mode or CUDA version than this workspace's, and
# their tree holds one cudarc. For each feature set below it writes a small
# program outside this checkout (this workspace's .cargo/config.toml must
# not reach it) that depends on cudarc with those features and on
# streamcomm by path, and whose one function takes the program's
# cudarc::driver::CudaStream beside streamcomm's CudaComm (two cudarcs would
# not compile), then runs `cargo check` and `cargo tree -i cudarc`.
#
# usage: scripts/check-cudarc-consumers.sh [NAME...]   (default: every set)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/cudarc-consumers

# NAME|cudarc features|CUDARC_CUDA_VERSION for the build ("" = none)
SETS=(
  # candle-core 0.11's own (nvcc's version, here given as the variable).
  'candle|"std","cublas","cublaslt","curand","driver","nvrtc","f16","f8","cuda-version-from-build-system","dynamic-linking"|12080'
  # mistral.rs: candle's, with its nccl feature, on CUDA 13.
  'mistralrs|"std","cublas","cublaslt","curand","driver","nvrtc","f16","cuda-version-from-build-system","dynamic-linking","nccl"|13000'
  # cubecl-cuda 0.10: no nvcc here, so the newest version cudarc knows.
  'cubecl|"std","driver","nvrtc","nccl","fallback-dynamic-loading","cuda-version-from-build-system","fallback-latest"|'
  'cuda-12080|"driver","dynamic-loading","cuda-12080"|'
  'cuda-13000|"driver","dynamic-loading","cuda-13000"|'
  # No cudarc of its own: streamcomm's choices alone (the newest version).
  'alone||'
)

want=("$@")
failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for set in "${SETS[@]}"; do
  IFS='|' read -r name features version <<<"$set"
  if [[ ${#want[@]} -gt 0 && " ${want[*]} " != *" $name "* ]]; then continue; fi
  dir="$work/$name"
  mkdir -p "$dir/src"
  dep=""
  [[ -n $features ]] &&
    dep="cudarc = { version = \"0.19\", default-features = false, features = [$features] }"
  cat >"$dir/Cargo.toml" <<TOML
[package]
name = "consumer-$name"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
streamcomm = { path = "$ROOT/core" }
$dep

[workspace]
TOML
  # The program's own cudarc where it has one, else streamcomm's re-export.
  cudarc=cudarc
  [[ -z $features ]] && cudarc=streamcomm::cuda::cudarc
  sed "s/CUDARC/$cudarc/" >"$dir/src/main.rs" <<'RS'
//! Compiles only if streamcomm's cudarc is this program's.
use std::sync::Arc;

use CUDARC::driver::CudaStream;
use streamcomm::cuda::CudaComm;

fn enqueue(comm: &CudaComm, stream: &Arc<CudaStream>) -> streamcomm::Result<()> {
    comm.barrier(stream)
}

fn main() {
    let _ = enqueue;
    println!("{:?}", streamcomm::cuda::device_count().is_ok());
}
RS
  # The workspace's lock file pins the crates both share.
  cp "$ROOT/Cargo.lock" "$dir/Cargo.lock"
  env_args=(env -u CUDARC_CUDA_VERSION -u RUSTC_WORKSPACE_WRAPPER)
  [[ -n $version ]] && env_args+=("CUDARC_CUDA_VERSION=$version")
  t0=$SECONDS
  if ! (cd "$dir" && "${env_args[@]}" CARGO_TARGET_DIR="$TARGET" cargo check -q 2>&1); then
    echo "cudarc consumer $name: cargo check failed (features: $features)" >&2
    failed=1
    continue
  fi
  cudarcs=$(cd "$dir" && "${env_args[@]}" cargo tree -q -i cudarc --prefix none 2>/dev/null | grep -c '^cudarc ' || true)
  if [[ $cudarcs != 1 ]]; then
    echo "cudarc consumer $name: $cudarcs cudarc crates in the tree" >&2
    failed=1
    continue
  fi
  echo "cudarc consumer $name: builds with streamcomm, one cudarc ($((SECONDS - t0)) s; ${version:+CUDARC_CUDA_VERSION=$version; }features: $features)"
done
exit $failed
