#!/usr/bin/env python3
"""PyTorch's NCCL all-reduce and barrier: the yardstick for cuda_bench on a
machine with at least two GPUs.

usage: python3 torch-nccl-baseline.py --check
           prints the number of GPUs and exits 0 where the baseline can run
           here, else prints why not and exits 77 (the GPU check's "skipped")
       python3 torch-nccl-baseline.py [MAX_BYTES]
           one process per GPU (torch.distributed, NCCL backend, rank r on
           GPU r); rank 0 prints a table in cuda_bench's columns and writes
           $OUT/torch_nccl.json when OUT is set

Measured as cuda_bench measures streamcomm (scripts/gpu-check-run.sh runs
both in one step, cuda_bench with as many ranks, one per GPU): the barrier
timed on the host around the call and a device synchronize (p50, p99,
p99.9, max of 2000, after 100 untimed), then all_reduce (f32 sum) from 8 B
to MAX_BYTES (default 256 MiB) by factors of 8, each size checked element
by element once and then timed over 20 calls (5 from 16 MiB). Bytes are
counted as nccl-tests counts them: algbw = bytes / time, busbw = algbw *
2 (n - 1) / n. torch's all_reduce works in place: the timed calls run on
one buffer, whose values grow but stay finite.
"""

import json
import os
import socket
import sys
import time

BARRIER_ITERS = 2000
BARRIER_WARMUP = 100
DEFAULT_MAX_BYTES = 256 << 20


def why_not():
    """None where the baseline can run here, else the reason."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # any failure to import is a reason not to run
        return f"no PyTorch here ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return "PyTorch sees no GPU"
    if not dist.is_available() or not dist.is_nccl_available():
        return "this PyTorch has no NCCL"
    gpus = torch.cuda.device_count()
    if gpus < 2:
        return (
            f"{gpus} GPU: the NCCL baseline needs at least 2 "
            "(on one GPU the yardstick is the device-to-device copy)"
        )
    return None


def percentiles(values):
    v = sorted(values)

    def at(q):
        return v[round((len(v) - 1) * q)]

    return at(0.5), at(0.99), at(0.999), v[-1]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, max_bytes, out):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
    )
    device = torch.device("cuda", rank)
    name = torch.cuda.get_device_name(device)
    records = []
    lead = rank == 0

    # Barrier: host time around the call and a device synchronize.
    times = []
    for i in range(BARRIER_ITERS + BARRIER_WARMUP):
        t = time.perf_counter()
        dist.barrier()
        torch.cuda.synchronize()
        if i >= BARRIER_WARMUP:
            times.append((time.perf_counter() - t) * 1e6)
    p50, p99, p999, top = percentiles(times)
    if lead:
        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        print(f"torch {torch.__version__}, NCCL {nccl}, "
              f"{world} ranks (processes), rank r on GPU r, {name}")
        print(f"{'barrier (us)':<22} {'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9}")
        print(f"{'torch.distributed':<22} {p50:>9.2f} {p99:>9.2f} {p999:>9.2f} {top:>9.2f}")
        records.append({"what": "barrier", "impl": "torch-nccl", "device": name,
                        "ranks": world, "p50_us": p50, "p99_us": p99,
                        "p999_us": p999, "max_us": top})
        print(f"{'bytes':>12} {'time_us':>10} {'algbw':>10} {'busbw':>10} {'wrong':>7}")

    # all_reduce sweep: 8 B .. max_bytes, x8.
    want = world * (world + 1) / 2
    size = 8
    failed = None
    while size <= max_bytes:
        count = size // 4
        x = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        wrong = int((x != want).sum().item())
        iters = 5 if size >= 16 << 20 else 20
        x.fill_(1.0 / world)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        dist.all_reduce(x)
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        secs = start.elapsed_time(end) / 1e3 / iters
        algbw = size / secs / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if lead:
            print(f"{size:>12} {secs * 1e6:>10.1f} {algbw:>10.3f} {busbw:>10.3f} {wrong:>7}")
            records.append({"what": "all_reduce", "impl": "torch-nccl", "ranks": world,
                            "bytes": size, "time_us": secs * 1e6, "algbw_gbs": algbw,
                            "busbw_gbs": busbw, "wrong": wrong})
        if wrong and failed is None:
            failed = f"rank {rank}: {wrong} wrong elements at {size} B"
        size *= 8
    if lead and out:
        with open(os.path.join(out, "torch_nccl.json"), "w") as f:
            json.dump(records, f, indent=1)
            f.write("\n")
    dist.destroy_process_group()
    if failed:
        raise SystemExit(failed)


def main():
    args = sys.argv[1:]
    if args == ["--check"]:
        reason = why_not()
        if reason:
            print(reason)
            sys.exit(77)
        import torch

        print(torch.cuda.device_count())
        return
    reason = why_not()
    if reason:
        print(f"SKIPPED: torch-nccl-baseline: {reason}")
        sys.exit(77)
    try:
        max_bytes = int(args[0]) if args else DEFAULT_MAX_BYTES
    except ValueError:
        sys.exit(f"usage: {sys.argv[0]} [--check | MAX_BYTES]; not a byte count: {args[0]!r}")
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    mp.spawn(rank_main, args=(world, free_port(), max_bytes, os.environ.get("OUT")),
             nprocs=world, join=True)


if __name__ == "__main__":
    main()
