#!/usr/bin/env bash
# nvidia-nccl-header.sh: NVIDIA's nccl.h, for the ABI check of
# nccl/include/nccl.h (nccl/tests/c_abi.rs): the header alone, taken from
# NVIDIA's PyPI wheel nvidia-nccl-cu12 (pinned to the 2.30 series our
# header covers) into target/nvidia-nccl/include/nccl.h. The wheel (about
# 350 MB, downloaded once into a temporary folder) is deleted; nothing is
# installed.
#
# usage: scripts/nvidia-nccl-header.sh   (prints the header's path)
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL=nvidia-nccl-cu12==2.30.7
dest=${CARGO_TARGET_DIR:-$PWD/target}/nvidia-nccl/include
if [[ ! -f "$dest/nccl.h" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "nvidia-nccl-header: no pip to fetch $WHEEL with: \`apt-get install python3-pip\`" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "nvidia-nccl-header: fetching $WHEEL for its nccl.h" >&2
  if ! python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$WHEEL" >&2; then
    echo "nvidia-nccl-header: pip could not fetch $WHEEL" >&2
    exit 1
  fi
  mkdir -p "$dest"
  python3 - "$tmp" "$dest/nccl.h" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("nvidia/nccl/include/nccl.h"))
PY
fi
echo "$dest/nccl.h"
