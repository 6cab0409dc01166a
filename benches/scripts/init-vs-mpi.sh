#!/usr/bin/env bash
# init-vs-mpi.sh [N...]: what creating a communicator costs, streamcomm
# against Open MPI in the same run, for N local ranks (default 8 16 32):
# Open MPI's MPI_Init (benches/mpi/init_cost.c, shared-memory transport)
# and `streamcomm-bench init` (creation, then an all-reduce of 16 bytes),
# each rank's resident memory after its first all-reduce. Needs Open MPI
# (`apt-get install openmpi-bin libopenmpi-dev`) and a release build of
# the benchmark (`cargo build --release -p streamcomm-bench`).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v mpicc >/dev/null || { echo "init-vs-mpi: no mpicc: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 1; }
bench=target/release/streamcomm-bench
[ -x "$bench" ] || { echo "init-vs-mpi: build $bench first (cargo build --release -p streamcomm-bench)" >&2; exit 1; }
exe=target/init_cost_mpi
mpicc -O2 -o "$exe" benches/mpi/init_cost.c
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
for n in "${@:-8 16 32}"; do
  for k in $n; do
    echo "== $k ranks"
    OMPI_MCA_btl=self,vader mpirun "${root[@]}" --oversubscribe -n "$k" "$exe"
    "$bench" init --ranks "$k" --bytes 16 --pair-bytes 4 | sed -n '1,2p;4,6p'
  done
done
