#!/usr/bin/env bash
# Runs the verbs transport's tests inside a QEMU guest with a Soft-RoCE
# device (rxe0): builds on this host, then boots one guest per test binary
# (../shared/rxe/run-in-rxe-guest.sh as the cargo runner; about 7 s a boot).
# Usage: scripts/verbs-check.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
runner="${RXE_RUNNER:-$(cd .. && pwd)/shared/rxe/run-in-rxe-guest.sh}"
if [ ! -x "$runner" ]; then
  echo "verbs-check: no Soft-RoCE guest runner at $runner (set RXE_RUNNER)" >&2
  exit 2
fi
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
# Emulated CPUs are slow: give every wait room, the tests bound themselves.
export STREAMCOMM_TIMEOUT="${STREAMCOMM_TIMEOUT:-120}"
exec cargo test -p streamcomm --features verbs --test verbs "$@" -- --test-threads=1 --nocapture
