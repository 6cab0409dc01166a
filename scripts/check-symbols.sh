#!/usr/bin/env bash
# Checks that a C header declares exactly the functions a shared library
# exports: `nm -D` of the library against the header's declarations (read
# after the preprocessor has removed its comments), and that every exported
# symbol matches the API's prefix (an extended regex).
#
# Usage: scripts/check-symbols.sh LIBRARY.so HEADER PREFIX
#   scripts/check-symbols.sh target/debug/deps/libstreamcomm_ffi.so ffi/include/streamcomm.h streamcomm_
#   scripts/check-symbols.sh target/debug/libnccl.so nccl/include/nccl.h 'p?nccl'
# Exit status 0 when they match; otherwise 1, printing the differences.
set -euo pipefail

lib=${1:?usage: $0 LIBRARY.so HEADER PREFIX}
header=${2:?usage: $0 LIBRARY.so HEADER PREFIX}
prefix=${3:?usage: $0 LIBRARY.so HEADER PREFIX}
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every dynamic symbol the library defines (functions and data alike).
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u >"$tmp/exported"
# Every function the header declares: an identifier followed by '('.
"$cc" -E -P -x c "$header" \
  | grep -oE "\\b($prefix)[A-Za-z0-9_]+[[:space:]]*\\(" \
  | sed -E 's/[[:space:]]*\($//' | sort -u >"$tmp/declared"

status=0
if grep -vE "^($prefix)" "$tmp/exported" >"$tmp/foreign"; then
  echo "exported symbols without the prefix $prefix:"
  sed 's/^/  /' "$tmp/foreign"
  status=1
fi
if ! diff -u --label "declared in $header" --label "exported by $lib" \
  "$tmp/declared" "$tmp/exported"; then
  echo "the header and the library disagree (lines above: - only declared, + only exported)"
  status=1
fi
if [ "$status" -eq 0 ]; then
  echo "ok: $(wc -l <"$tmp/exported") symbols, all declared in $header"
fi
exit "$status"
