#!/usr/bin/env python3
"""Predicted against measured time for every algorithm of the cost model.

Two steps, so that the model can be checked again without measuring again:

  measure OUT.json [BENCH]       run every algorithm of every collective at
                                 N in {2, 3, 4, 6, 8} ranks (processes on this
                                 host, shared memory) and sizes 8 B to 16 MiB
                                 (factor 8) and 64 MiB; each point is the median of
                                 LAUNCHES launches (default 3) of
                                 `streamcomm-bench`, taken in turns over
                                 every configuration (so a point's launches
                                 are minutes apart), each timing back-to-back
                                 calls (1000 per size up to 32 KiB, 200 at
                                 256 KiB, 20 at 2-16 MiB, 5 at 64 MiB), so that the wake-up of
                                 the ranks' idle stream threads at the start
                                 of a batch (60-70 us each on this VM) is
                                 spread over enough calls to measure the
                                 steady state the model predicts; the load
                                 average is kept with every launch.
  links TUNING [BENCH]           with HOSTS=2: the links between the pretend
                                 hosts, calibrated across them into TUNING
                                 (`streamcomm-bench calibrate` under
                                 `streamcomm-run --nnodes 2`, one rank a
                                 host; run after `calibrate` on this machine,
                                 whose other parameters it keeps)
  compare OUT.json TUNING [BENCH]
                                 the model's prediction for every point
                                 (`streamcomm-bench model --points`, with the
                                 tuning file), then:
    - one line per (collective, algorithm, N, size): measured and predicted
      time (us) and predicted / measured;
    - the fraction of points predicted within 35%, by size class and by N;
    - for every (collective, N, size), the algorithm the model selects and
      how much slower it measured than the best one (the fraction within 20%).

  noise TUNING OUT.json... [--bench BENCH]
                                 how far the selection criterion can be
                                 checked on this machine, over several
                                 measurement runs of the same points:
    - the same schedule measured under two names in one run (a program
      against itself): how often the two medians differ by more than 20%;
    - with hindsight, the one program a point would best be given in every
      run (the one within 20% of the fastest in the most runs): how many
      (run, point) pairs even that choice keeps within 20%;
    - the model's own selection, summed over the runs.

Environment: LAUNCHES (default 3), RANKS (default "2 3 4 6 8"); for
compare, STAT=min takes each point's fastest launch instead of the median,
and PER_HOST="2 3 4" keeps only the points with that many ranks per host
(across pretend hosts: "1" is one rank a host, tcp only, the others the
hierarchical points).
HOSTS=2 measures across two pretend hosts instead: network namespaces on a
bridge (scripts/netns.sh, made once for the whole measurement, root and
iproute2 needed), RANKS/2 consecutive ranks in each (shared memory inside,
tcp between), launched by `streamcomm-run --nnodes 2` (built next to the
bench: cargo build --release -p streamcomm-run -p streamcomm-bench), RANKS
default "2 4 6 8", fewer calls a point (HOST_SWEEPS); the points keep their
ranks per host for `compare`.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

ALGOS = {
    "all_reduce": ["ring", "tree", "halving_doubling"],
    "all_gather": ["ring", "recursive_doubling", "bruck"],
    "broadcast": ["chain", "binomial"],
    "reduce_scatter": ["ring"],
    "reduce": ["chain", "binomial"],
    "all_to_all": ["pairwise"],
}
# (first size, last size, timed calls, warm-up calls). Until 2026-11-30
# (results/2026-11-30b and before): 50 calls up to 32 KiB, 5 above, where
# the start of a batch (an idle thread woken: 60-70 us here) weighed as
# much as the calls.
# 64 MiB since 2026-12-01 (the largest size): 5 calls, ~50 ms each
# at 8 ranks.
SWEEPS = [("8", "32K", "1000", "20"), ("256K", "256K", "200", "5"), ("2M", "16M", "20", "3"),
          ("64M", "64M", "5", "1")]


HOSTS = int(os.environ.get("HOSTS", "1"))
# Between pretend hosts a step costs ~20-30 us of tcp, not ~1 us.
HOST_SWEEPS = [("8", "32K", "200", "10"), ("256K", "2M", "20", "3"), ("16M", "64M", "3", "1")]
NET = f"mvm{os.getpid() % 100000}"
launches_made = [0]


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(bench, coll, algo, n, sweep):
    lo, hi, iters, warm = sweep
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    env = dict(os.environ, STREAMCOMM_TIMEOUT="120")
    env.pop("STREAMCOMM_ALGO", None)
    env.pop("STREAMCOMM_TUNING_FILE", None)
    bench_args = [coll, "--algo", algo, "-b", lo, "-e", hi,
                  "-f", "8", "-n", iters, "-w", warm, "--json", path]
    if HOSTS == 1:
        args = [bench, "--ranks", str(n)] + bench_args
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"{' '.join(args)} failed:\n{done.stderr}")
    else:
        across_hosts(bench, n, bench_args, env)
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    return [r for r in doc["rows"] if r["count"] > 0]


def across_hosts(bench, n, bench_args, env):
    """One launch of `n` ranks, n / HOSTS in each pretend host."""
    launcher = os.path.join(os.path.dirname(bench), "streamcomm-run")
    # A fresh bootstrap port each launch: no wait for the last one's to close.
    launches_made[0] += 1
    port = 29700 + launches_made[0] % 2000
    env = dict(env, STREAMCOMM_SECRET=os.urandom(16).hex())
    procs = []
    for i in range(HOSTS):
        cmd = ["ip", "netns", "exec", f"{NET}-h{i}", launcher, "--nnodes", str(HOSTS),
               "--node-rank", str(i), "--master-addr", "10.233.0.1", "--master-port",
               str(port), "-n", str(n // HOSTS), "--", bench] + bench_args
        procs.append((cmd, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    for cmd, proc in procs:
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{err}")


def across_pretend_hosts(job):
    """Runs `job()` with the pretend hosts' namespaces up."""
    netns = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts/netns.sh")
    subprocess.run([netns, "up", NET, str(HOSTS)], check=True, capture_output=True)
    try:
        job()
    finally:
        subprocess.run([netns, "down", NET], capture_output=True)


def measure(out, bench):
    if HOSTS == 1:
        return measure_here(out, bench)
    across_pretend_hosts(lambda: measure_here(out, bench))


def links(tuning, bench):
    if HOSTS < 2:
        sys.exit("links: needs HOSTS=2 (or more): the links between pretend hosts")
    env = dict(os.environ, STREAMCOMM_TIMEOUT="120")
    for var in ("STREAMCOMM_ALGO", "STREAMCOMM_TUNING_FILE", "STREAMCOMM_TRANSPORT"):
        env.pop(var, None)
    args = ["calibrate", "--out", os.path.abspath(tuning)]
    across_pretend_hosts(lambda: across_hosts(bench, HOSTS, args, env))
    with open(tuning) as f:
        print("".join(line for line in f if line.startswith(("#", "tcp."))), end="")


def measure_here(out, bench):
    launches = int(os.environ.get("LAUNCHES", "3"))
    default_ranks = "2 3 4 6 8" if HOSTS == 1 else "2 4 6 8"
    ranks = [int(x) for x in os.environ.get("RANKS", default_ranks).split()]
    sweeps = SWEEPS if HOSTS == 1 else HOST_SWEEPS
    configs = [(coll, algo, n) for coll, algos in ALGOS.items() for algo in algos for n in ranks]
    times, loads = {}, {}
    # Launch after launch of every configuration, not one configuration's
    # launches back to back: this machine's speed drifts over minutes, and
    # a point's samples then span the whole measurement.
    for launch in range(launches):
        for coll, algo, n in configs:
            for sweep in sweeps:
                loads.setdefault((coll, algo, n), []).append(load())
                for r in run(bench, coll, algo, n, sweep):
                    if r["wrong"]:
                        sys.exit(f"{coll} {algo} n={n}: {r['wrong']} wrong elements")
                    times.setdefault((coll, algo, n, r["bytes"]), []).append(r["time_us"])
        print(f"# launch {launch + 1} of {launches} done (load {load():.1f})", file=sys.stderr)
    points = []
    for (coll, algo, n, size), ts in times.items():
        points.append({"collective": coll, "algo": algo, "ranks": n, "per_host": n // HOSTS,
                       "bytes": size,
                       "time_us": statistics.median(ts), "samples_us": ts,
                       "load": max(loads[(coll, algo, n)])})
    with open(out, "w") as f:
        json.dump({"points": points}, f, indent=1)


def predictions(points, tuning, bench):
    # Pretend hosts (HOSTS=2) share this machine's cores: all the ranks do.
    text = "".join(f"{p['collective']} {p['algo']} {p['ranks']} {p.get('per_host', p['ranks'])} "
                   f"{p['bytes']} {p['ranks']}\n" for p in points)
    env = dict(os.environ, STREAMCOMM_TUNING_FILE=tuning)
    done = subprocess.run([bench, "model", "--points", "-", "--schedule-ids"], input=text,
                          env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"{bench} model --points failed:\n{done.stderr}")
    # Each line: the point, the predicted us, the id of the schedule it runs.
    return [(float(line.split()[-2]), line.split()[-1]) for line in done.stdout.splitlines()
            if line and not line.startswith("#")]


def size_class(b):
    return "8 B-4 KiB" if b <= 4096 else ("32 KiB-256 KiB" if b <= 262144 else "2-64 MiB")


def by_point(points, preds):
    """The candidates of every (collective, ranks, bytes): (algorithm,
    measured us, predicted us, schedule id, launches' us)."""
    groups = {}
    for p, (pred, schedule) in zip(points, preds):
        groups.setdefault((p["collective"], p["ranks"], p["bytes"]), []).append(
            (p["algo"], p["time_us"], pred, schedule, p["samples_us"]))
    return groups


def selected(cands):
    """As the library chooses: the first candidate (in its order, which
    ALGOS follows) within 1% of the fastest prediction."""
    fastest = min(c[2] for c in cands)
    return next(c for c in cands if c[2] <= fastest * 1.01)


def pick():
    """A point's time from its launches: the median, or with STAT=min the
    fastest (what the machine does when other work leaves the ranks
    alone: noise only ever adds time)."""
    return min if os.environ.get("STAT") == "min" else statistics.median


def compare(path, tuning, bench):
    with open(path) as f:
        points = json.load(f)["points"]
    if os.environ.get("PER_HOST"):
        keep = {int(x) for x in os.environ["PER_HOST"].split()}
        points = [p for p in points if p.get("per_host", p["ranks"]) in keep]
    predicted = predictions(points, tuning, bench)
    preds = [pred for pred, _ in predicted]
    for p in points:
        p["time_us"] = pick()(p["samples_us"])
    print(f"# {'collective':<15} {'algorithm':<18} {'ranks':>5} {'bytes':>10} "
          f"{'measured_us':>12} {'model_us':>12} {'model/meas':>10}")
    close, by_class, by_n, by_algo = 0, {}, {}, {}
    for p, pred in zip(points, preds):
        q = pred / p["time_us"]
        ok = abs(q - 1) <= 0.35
        close += ok
        for d, k in ((by_class, size_class(p["bytes"])), (by_n, p["ranks"]),
                     (by_algo, f"{p['collective']} {p['algo']}")):
            d.setdefault(k, [0, 0])
            d[k][0] += ok
            d[k][1] += 1
        print(f"  {p['collective']:<15} {p['algo']:<18} {p['ranks']:>5} {p['bytes']:>10} "
              f"{p['time_us']:>12.1f} {pred:>12.1f} {q:>10.2f}")
    print(f"# model within 35% of the measurement: {close} of {len(points)} points "
          f"({100 * close / len(points):.0f}%)")
    for name, d in (("size", by_class), ("ranks", by_n), ("algorithm", by_algo)):
        print(f"# by {name}: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in d.items()))
    groups = by_point(points, predicted)
    ok, total, ok_apart, total_apart, pooled = 0, 0, 0, 0, 0
    print(f"# {'collective':<15} {'ranks':>5} {'bytes':>10} {'selected':<18} {'best':<18} "
          f"{'selected/best':>13}")
    for (coll, n, size), cands in sorted(groups.items()):
        if len(cands) < 2:
            continue
        chosen = selected(cands)
        best = min(cands, key=lambda c: c[1])
        ok_apart += chosen[1] / best[1] <= 1.2
        total_apart += 1
        # Algorithms that run the same steps here are one program measured
        # under several names: their time is the median of all their
        # launches (what one of them measured faster is noise, not a better
        # choice). The selected program against the fastest program.
        programs = {}
        for c in cands:
            programs.setdefault(c[3], []).extend(c[4])
        if len(programs) < 2:
            # Every candidate runs the same steps: nothing to select.
            print(f"  {coll:<15} {n:>5} {size:>10} {chosen[0]:<18} {'(one schedule)':<18} "
                  f"{'-':>13}")
            continue
        time = {k: pick()(v) for k, v in programs.items()}
        best_program = min(time, key=time.get)
        ratio = time[chosen[3]] / time[best_program]
        same = [c[0] for c in cands if c[3] == best_program]
        total += 1
        pooled += len(programs) < len(cands)
        ok += ratio <= 1.2
        print(f"  {coll:<15} {n:>5} {size:>10} {chosen[0]:<18} {'='.join(same):<18} "
              f"{ratio:>13.2f}")
    if total:
        print(f"# selected within 20% of the best measured: {ok} of {total} points "
              f"({100 * ok / total:.0f}%), algorithms that run the same schedule measured as one "
              f"program ({pooled} points have such; {total_apart - total} have one schedule "
              f"only, nothing to select)")
        print(f"# each algorithm's own measurement: {ok_apart} of {total_apart} points "
              f"({100 * ok_apart / total_apart:.0f}%)")


def programs_by_point(path, tuning, bench):
    """For one run: {(collective, ranks, bytes): {schedule id: (names,
    time of all their launches pooled, each name's own time)}}, and the
    schedule id the model selects at each point."""
    with open(path) as f:
        points = json.load(f)["points"]
    for p in points:
        p["time_us"] = pick()(p["samples_us"])
    out, chosen = {}, {}
    for k, cands in by_point(points, predictions(points, tuning, bench)).items():
        progs = {}
        for algo, t, _, schedule, samples in cands:
            names, pooled, apart = progs.setdefault(schedule, ([], [], []))
            names.append(algo)
            pooled.extend(samples)
            apart.append(t)
        out[k] = {sid: (names, pick()(pooled), apart)
                  for sid, (names, pooled, apart) in progs.items()}
        chosen[k] = selected(cands)[3]
    return out, chosen


def noise(tuning, paths, bench):
    runs = [programs_by_point(path, tuning, bench) for path in paths]
    # A program against itself: the medians of its names in one run.
    pairs = [max(apart) / min(apart) for progs, _ in runs for prog in progs.values()
             for _, _, apart in prog.values() if len(apart) > 1]
    over = sum(r > 1.2 for r in pairs)
    if pairs:
        pairs.sort()
        print(f"# one schedule under two names, one run: {over} of {len(pairs)} pairs differ by "
              f"more than 20% (median {pairs[len(pairs) // 2]:.2f}x, largest {pairs[-1]:.2f}x)")
    keys = set.intersection(*(set(k for k, v in progs.items() if len(v) > 1)
                              for progs, _ in runs))
    hind, model, total = 0, 0, 0
    for k in sorted(keys):
        sids = set.intersection(*(set(progs[k]) for progs, _ in runs))
        within = {sid: sum(progs[k][sid][1] <= 1.2 * min(v[1] for v in progs[k].values())
                           for progs, _ in runs) for sid in sids}
        hind += max(within.values())
        total += len(runs)
        model += sum(progs[k][chosen[k]][1] <= 1.2 * min(v[1] for v in progs[k].values())
                     for progs, chosen in runs)
    print(f"# with hindsight, one program a point for all {len(runs)} runs: {hind} of {total} "
          f"(run, point) pairs within 20% of that run's fastest ({100 * hind / total:.1f}%)")
    print(f"# the model's selection: {model} of {total} ({100 * model / total:.1f}%)")


def main():
    default_bench = "target/release/streamcomm-bench"
    if len(sys.argv) >= 3 and sys.argv[1] == "measure":
        measure(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else default_bench)
    elif len(sys.argv) >= 3 and sys.argv[1] == "links":
        links(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else default_bench)
    elif len(sys.argv) >= 4 and sys.argv[1] == "noise":
        args = sys.argv[3:]
        bench = default_bench
        if "--bench" in args:
            i = args.index("--bench")
            bench = args[i + 1]
            args = args[:i] + args[i + 2:]
        noise(sys.argv[2], args, bench)
    elif len(sys.argv) >= 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else default_bench)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
