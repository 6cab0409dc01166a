#!/usr/bin/env bash
# Runs the verbs transport's tests inside a QEMU guest with a Soft-RoCE
# device (rxe0), all in one boot (about 7 s; the first run also installs
# qemu and fetches the guest kernel): the verbs integration tests,
# point-to-point under injected faults over verbs, the multicast barrier
# under injected loss, the library's GPUDirect and UD-multicast unit
# tests, then the bare-protocol reference
# ping-pong (scripts/verbs-reference-pingpong.c). The test binaries are
# those of the README's test command (`cargo test --workspace
# --all-features`), built here first if they are not yet. About 3.5
# minutes in all (the guest's CPU is emulated).
#
# The runner is $RXE_RUNNER, else ../shared/rxe/run-in-rxe-guest.sh beside
# this checkout (docs/testing.md). Without one the script fails (exit 2), or
# with VERBS_CHECK_OPTIONAL=1 says so and exits 0.
# Every verbs test runs with STREAMCOMM_REQUIRE_RDMA=1: in the guest a
# missing device fails the test instead of skipping it.
# Usage: scripts/verbs-check.sh [test name filter, default verbs::; with a
# filter only the integration tests run]
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
# Emulated CPUs are slow: give every wait room; the tests bound themselves.
export STREAMCOMM_TIMEOUT="${STREAMCOMM_TIMEOUT:-120}"
export STREAMCOMM_REQUIRE_RDMA=1
# The executables of the integration tests (`transports`, and `faults` for
# point-to-point under injected faults) and of the library's unit tests,
# from the same command line as the README's test run (so nothing is
# rebuilt after it).
read -r transports lib_tests faults < <(
  cargo test --workspace --all-features --no-run --message-format=json |
    python3 -c 'import json, sys
found = {}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        found.setdefault(m["target"]["name"], m["executable"])
print(found.get("transports", "-"), found.get("streamcomm", "-"), found.get("faults", "-"))')
for exe in "$transports" "$lib_tests" "$faults"; do
  [ -x "$exe" ] || { echo "verbs-check: a test executable of streamcomm was not built" >&2; exit 1; }
done
# Beside the test executables, wherever CARGO_TARGET_DIR puts them.
pp="$(dirname "$(dirname "$(dirname "$transports")")")/verbs-reference-pingpong"
cc -O2 -Wall -Wextra -Werror -o "$pp" scripts/verbs-reference-pingpong.c -libverbs -lpthread
# In the guest, as under cargo: from the package's directory.
cd core
if [ $# -gt 0 ]; then
  exec "$runner" "$transports" "$1" --test-threads=1 --nocapture
fi
"$runner" sh -c "set -e
  $transports verbs:: --test-threads=1 --nocapture
  $transports multicast:: --test-threads=1 --nocapture
  $faults _verbs --test-threads=1 --nocapture
  $lib_tests gpudirect --test-threads=1 --nocapture
  $lib_tests verbs::multicast --test-threads=1 --nocapture
  $pp write 8 4096 300
  $pp imm 32 65536 300
  PP_CHANNEL=1 PP_ONE_CQ=1 PP_POLL_EVERY=4 PP_PAUSE=1 $pp imm 32 65536 300"
