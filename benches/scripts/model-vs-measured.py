#!/usr/bin/env python3
"""Predicted against measured time for every algorithm (issue 10).

Runs `streamcomm-bench COLLECTIVE --algo ALGO --ranks N` for every
algorithm of every collective at N in {2, 3, 4, 6, 8} ranks (processes on
this host, shared memory) and sizes 8 B to 16 MiB (factor 8), with the
tuning file given (calibrate first), and prints:

- one line per (collective, algorithm, N, size): measured and predicted
  time (us) and predicted / measured;
- the fraction of points predicted within 35%;
- for every (collective, N, size), the algorithm the model selects and how
  much slower it measured than the best one (the fraction within 20%).

Usage: benches/scripts/model-vs-measured.py TUNING_FILE [BENCH_BINARY]
"""

import json
import os
import subprocess
import sys
import tempfile

ALGOS = {
    "all_reduce": ["ring", "tree", "halving_doubling"],
    "all_gather": ["ring", "recursive_doubling", "bruck"],
    "broadcast": ["chain", "binomial"],
    "reduce_scatter": ["ring"],
    "reduce": ["chain"],
    "all_to_all": ["pairwise"],
}
RANKS = [2, 3, 4, 6, 8]


def run(bench, tuning, coll, algo, n):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    env = dict(os.environ, STREAMCOMM_TUNING_FILE=tuning, STREAMCOMM_TIMEOUT="120")
    env.pop("STREAMCOMM_ALGO", None)
    args = [bench, coll, "--ranks", str(n), "--algo", algo, "-b", "8", "-e", "64M",
            "-f", "8", "-n", "5", "-w", "2", "--json", path]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr}")
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    return [r for r in doc["rows"] if r["count"] > 0]


def main():
    tuning = sys.argv[1]
    bench = sys.argv[2] if len(sys.argv) > 2 else "target/release/streamcomm-bench"
    points = []
    for coll, algos in ALGOS.items():
        for algo in algos:
            for n in RANKS:
                for r in run(bench, tuning, coll, algo, n):
                    assert r["algo"] == algo, r
                    if r["wrong"]:
                        sys.exit(f"{coll} {algo} n={n}: {r['wrong']} wrong elements")
                    points.append((coll, algo, n, r["bytes"], r["time_us"], r["predicted_us"]))
    print(f"# {'collective':<15} {'algorithm':<18} {'ranks':>5} {'bytes':>10} "
          f"{'measured_us':>12} {'model_us':>12} {'model/meas':>10}")
    close = 0
    for coll, algo, n, size, meas, pred in points:
        q = pred / meas
        close += abs(q - 1) <= 0.35
        print(f"  {coll:<15} {algo:<18} {n:>5} {size:>10} {meas:>12.1f} {pred:>12.1f} {q:>10.2f}")
    print(f"# model within 35% of the measurement: {close} of {len(points)} points "
          f"({100 * close / len(points):.0f}%)")
    # Selection: per (collective, ranks, size), the model's pick against the best.
    groups = {}
    for coll, algo, n, size, meas, pred in points:
        groups.setdefault((coll, n, size), []).append((algo, meas, pred))
    ok, total = 0, 0
    print(f"# {'collective':<15} {'ranks':>5} {'bytes':>10} {'selected':<18} {'best':<18} "
          f"{'selected/best':>13}")
    for (coll, n, size), cands in sorted(groups.items()):
        if len(cands) < 2:
            continue
        chosen = min(cands, key=lambda c: c[2])
        best = min(cands, key=lambda c: c[1])
        ratio = chosen[1] / best[1]
        total += 1
        ok += ratio <= 1.2
        print(f"  {coll:<15} {n:>5} {size:>10} {chosen[0]:<18} {best[0]:<18} {ratio:>13.2f}")
    if total:
        print(f"# selected within 20% of the best measured: {ok} of {total} points "
              f"({100 * ok / total:.0f}%)")


if __name__ == "__main__":
    main()
