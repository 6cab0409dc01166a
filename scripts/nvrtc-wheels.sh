#!/usr/bin/env bash
# nvrtc-wheels.sh: NVRTC and the CUDA headers for compiling the CUDA kernels
# without a GPU or a CUDA toolkit: NVIDIA's pinned PyPI wheels, installed
# with `pip install --target` into a folder of this checkout's own
# (target/nvidia-wheels; nothing system-wide, so it works where pip refuses
# a system install), once; later runs reuse it. About 80 MB, downloaded once.
#
# usage: eval "$(scripts/nvrtc-wheels.sh)"
#   prints `export STREAMCOMM_NVRTC_LIB=...` and
#   `export STREAMCOMM_CUDA_INCLUDE=...` for the shell to take; says what it
#   does on stderr. Exits 1, naming the command that would fix it, when the
#   wheels cannot be had (no python3 or pip, no network).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79)
dir=${CARGO_TARGET_DIR:-$PWD/target}/nvidia-wheels
lib="$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
include="$dir/nvidia/cuda_runtime/include"

if [[ ! -f "$lib" || ! -f "$include/cuda.h" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "nvrtc-wheels: no pip to install NVRTC with: \`apt-get install python3-pip\`" \
         "(or set STREAMCOMM_NVRTC_LIB to a libnvrtc.so.12 and STREAMCOMM_CUDA_INCLUDE" \
         "to a folder with cuda.h)" >&2
    exit 1
  fi
  echo "nvrtc-wheels: installing ${WHEELS[*]} into $dir (about 80 MB)" >&2
  rm -rf "$dir.partial"
  if ! python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
      --target "$dir.partial" "${WHEELS[@]}" >&2; then
    rm -rf "$dir.partial"
    echo "nvrtc-wheels: pip could not install them; by hand:" \
         "python3 -m pip install --target $dir ${WHEELS[*]}" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
fi
[[ -f "$lib" && -f "$include/cuda.h" ]] ||
  { echo "nvrtc-wheels: $dir lacks $lib or $include/cuda.h" >&2; exit 1; }
echo "nvrtc-wheels: NVRTC $lib" >&2
printf 'export STREAMCOMM_NVRTC_LIB=%q\nexport STREAMCOMM_CUDA_INCLUDE=%q\n' "$lib" "$include"
