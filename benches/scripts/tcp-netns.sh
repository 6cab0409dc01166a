#!/usr/bin/env bash
# tcp-netns.sh: streamcomm-bench between two pretend hosts (network namespaces).
#
# usage: benches/scripts/tcp-netns.sh BENCH-ARGS...
#   e.g. benches/scripts/tcp-netns.sh all_reduce -b 16 -e 64M -f 4 -n 10 -w 3 -c 1
#        benches/scripts/tcp-netns.sh sendrecv -b 8 -e 8 -n 10
#
# Makes two namespaces on one bridge with scripts/netns.sh (10.233.0.1 and
# 10.233.0.2), runs one `streamcomm-run --nnodes 2 -n 1` per namespace (one
# rank each; rank 0 in the first), and removes the namespaces on exit. The
# ranks are in different network namespaces, so the library connects them
# over tcp on the veth pair and the bridge, not loopback; rank 0 prints the
# raw tcp figures between them next to the benchmark's.
#
# Environment: BENCH and RUN (paths to streamcomm-bench and streamcomm-run;
# default: target/release/ of CARGO_TARGET_DIR, or of the workspace), NAME
# (the network's name, default scb<pid>), PORT (bootstrap port, default
# 29600). Needs root and iproute2, like scripts/netns.sh. Exit status: the
# first non-zero status of the two launchers, else 0.

set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/release
bench=${BENCH:-$bin/streamcomm-bench}
run=${RUN:-$bin/streamcomm-run}
name=${NAME:-scb$$}
port=${PORT:-29600}

[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
for f in "$bench" "$run"; do
    [ -x "$f" ] || { echo "tcp-netns.sh: $f is missing (cargo build --release -p streamcomm-bench -p streamcomm-run)" >&2; exit 1; }
done

trap '"$root/scripts/netns.sh" down "$name" >/dev/null' EXIT
"$root/scripts/netns.sh" up "$name" 2 >/dev/null || exit 1

secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
pids=()
for i in 0 1; do
    ip netns exec "$name-h$i" env STREAMCOMM_SECRET="$secret" \
        "$run" --nnodes 2 --node-rank "$i" --master-addr 10.233.0.1 --master-port "$port" \
        -n 1 -- "$bench" "$@" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid"
    s=$?
    [ "$status" = 0 ] && status=$s
done
exit "$status"
