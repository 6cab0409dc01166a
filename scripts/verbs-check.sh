#!/usr/bin/env bash
# Runs the verbs transport's tests inside a QEMU guest with a Soft-RoCE
# device (rxe0): builds on this host, then boots one guest per test binary
# (run-in-rxe-guest.sh as the cargo runner: about 7 s a boot, the first run
# also installs qemu and fetches the guest kernel): the verbs integration
# tests, then the library's GPUDirect unit tests, then the bare-protocol
# reference ping-pong (scripts/verbs-reference-pingpong.c). About 2 minutes
# in all.
#
# The runner is $RXE_RUNNER, else ../shared/rxe/run-in-rxe-guest.sh beside
# this checkout (docs/testing.md). Without one the script fails (exit 2), or
# with VERBS_CHECK_OPTIONAL=1 says so and exits 0.
# Every verbs test runs with STREAMCOMM_REQUIRE_RDMA=1: in the guest a
# missing device fails the test instead of skipping it.
# Usage: scripts/verbs-check.sh [test name filter, default verbs::]
set -euo pipefail
cd "$(dirname "$0")/.."
runner="${RXE_RUNNER:-}"
c=../shared/rxe/run-in-rxe-guest.sh
if [ -z "$runner" ] && [ -x "$c" ]; then
  runner="$(cd "$(dirname "$c")" && pwd)/$(basename "$c")"
fi
if [ -z "$runner" ] || [ ! -x "$runner" ]; then
  echo "verbs-check: no Soft-RoCE guest runner (set RXE_RUNNER); verbs tests not run in a guest" >&2
  [ "${VERBS_CHECK_OPTIONAL:-0}" = 1 ] && exit 0
  exit 2
fi
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
# Emulated CPUs are slow: give every wait room; the tests bound themselves.
export STREAMCOMM_TIMEOUT="${STREAMCOMM_TIMEOUT:-120}"
export STREAMCOMM_REQUIRE_RDMA=1
# --workspace --all-features: the very build of CI's test run, reused.
cargo test --workspace --all-features --test transports -- "${1:-verbs::}" --test-threads=1 --nocapture
# GPUDirect RDMA on the emulated device (the library's unit tests named
# gpudirect): a second boot, skipped when a filter was given.
if [ $# -eq 0 ]; then
  # The library's unit-test binary from CI's very build (`-p streamcomm`
  # would unify features differently and rebuild it), run by the guest.
  lib_tests=$(cargo test --workspace --all-features --lib --no-run --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "streamcomm" \
            and m["profile"]["test"] and m.get("executable"):
        print(m["executable"])')
  [ -n "$lib_tests" ] || { echo "verbs-check: no unit-test binary of streamcomm found" >&2; exit 1; }
  "$runner" "$lib_tests" gpudirect --test-threads=1 --nocapture
  # The bare-protocol reference (scripts/verbs-reference-pingpong.c):
  # compiled without warnings, and a short run of each protocol on the
  # device (it checks every message), a third boot.
  cc -O2 -Wall -Wextra -Werror -o target/verbs-reference-pingpong \
    scripts/verbs-reference-pingpong.c -libverbs -lpthread
  pp="$PWD/target/verbs-reference-pingpong"
  "$runner" sh -c "$pp write 8 4096 300 && $pp imm 32 65536 300 &&
    PP_CHANNEL=1 PP_ONE_CQ=1 PP_POLL_EVERY=4 PP_PAUSE=1 $pp imm 32 65536 300"
fi
