#!/usr/bin/env bash
# p2p-crossover.sh: where the eager and rendezvous latency curves cross.
#
# usage: benches/scripts/p2p-crossover.sh [BENCH-ARGS...]
#   default sizes: -b 1K -e 4M -f 2 (the knee is in there on shared memory)
#
# Runs `streamcomm-bench sendrecv --ranks 2` twice, once with every message
# eager (STREAMCOMM_P2P_EAGER_LIMIT=1G) and once with every non-empty message
# by rendezvous (=0), then prints both p50 one-way latencies and bandwidths
# per size and the smallest size from which rendezvous stays faster: the
# measured basis of the default eager limit. Set STREAMCOMM_TRANSPORT=tcp (or
# run under benches/scripts/tcp-netns.sh's set-up) for the tcp curve.
# Environment: BENCH (default target/release/streamcomm-bench).

set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bench=${BENCH:-${CARGO_TARGET_DIR:-$root/target}/release/streamcomm-bench}
[ -x "$bench" ] || { echo "p2p-crossover.sh: $bench is missing (cargo build --release -p streamcomm-bench)" >&2; exit 1; }
[ $# -ge 1 ] || set -- -b 1K -e 4M -f 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
STREAMCOMM_P2P_EAGER_LIMIT=1G "$bench" sendrecv --ranks 2 "$@" --json "$tmp/eager.json" >/dev/null
STREAMCOMM_P2P_EAGER_LIMIT=0 "$bench" sendrecv --ranks 2 "$@" --json "$tmp/rdv.json" >/dev/null
python3 - "$tmp/eager.json" "$tmp/rdv.json" <<'PY'
import json, sys
eager = {r["bytes"]: r for r in json.load(open(sys.argv[1]))["sendrecv"]}
rdv = {r["bytes"]: r for r in json.load(open(sys.argv[2]))["sendrecv"]}
print(f"# {'size':>10} {'eager p50':>10} {'rdv p50':>10} {'eager GB/s':>11} {'rdv GB/s':>9}  faster")
sizes = sorted(set(eager) & set(rdv))
faster = {}
for s in sizes:
    e, r = eager[s], rdv[s]
    assert e["protocol"] == "eager" and r["protocol"] == "rendezvous", (s, e["protocol"], r["protocol"])
    faster[s] = "rendezvous" if r["latency"]["p50"] < e["latency"]["p50"] else "eager"
    print(f"  {s:>10} {e['latency']['p50']:>10.2f} {r['latency']['p50']:>10.2f} "
          f"{e['bandwidth_gbps']:>11.3f} {r['bandwidth_gbps']:>9.3f}  {faster[s]}")
cross = next((s for i, s in enumerate(sizes) if all(faster[t] == "rendezvous" for t in sizes[i:])), None)
print(f"# rendezvous is faster from {cross} bytes on" if cross else "# eager is faster at the largest size")
PY
