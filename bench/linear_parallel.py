#!/usr/bin/env python3
"""LinearParallelOperation (LINEAR_ALL_REDUCE) against the same work through torch, in one run.

For R spawned ranks (one host, processes) and each dtype and m (x [m, k], weight [n, k]), every
round times each path once, in turn, so load on the machine hits all paths alike:
  op            LinearParallelOperation via OperationTorch.execute_out, the op's own choice
  op_serial     the same with COLLOPS_ALGO_LINEARPARALLEL=serial (no chunks)
  op_overlap    the same with COLLOPS_ALGO_LINEARPARALLEL=overlap (chunked products overlap)
  mm_collops    torch.matmul(x, w.t()) then dist.all_reduce on a "collops" group
  mm_gloo       torch.matmul(x, w.t()) then dist.all_reduce on a gloo group
  product       the op's product alone: PURE_LINEAR (no collective), y in x's dtype
  mm            torch.matmul(x, w.t()) alone (torch's CPU matmul: oneDNN for bfloat16, MKL for
                float32)
Reported per path: the median over rounds of the max over ranks, in ms; then the ratios the
issue asks for (op vs mm_collops and mm_gloo; overlap vs serial). Each rank computes with the
threads collops gives it (CPUs / R, as OperationTorch does for lccl ranks). The product's
ratio to oneDNN called directly is bench/linear_blas.cpp's.

    python3 bench/linear_parallel.py                          # R=2, bf16 and f32, m 16,256,2048
    python3 bench/linear_parallel.py --dtypes bfloat16 --ms 256 --rounds 5
    python3 bench/linear_parallel.py -r 1 --threads 1   # products alone: one process, one thread
    python3 bench/linear_parallel.py --w8a8 --dtypes bfloat16 --ms 256   # + the W8A8 table

With --w8a8 a second table times, interleaved in the same rounds, the quantised op (int8 x and
weight, int32 bias, per-channel float32 scale, y bfloat16: quantType 1) against the bfloat16 op
of the same m, k, n, both LINEAR_ALL_REDUCE.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spawned_ranks  # noqa: E402  (bench/, beside this script)

PATHS = ("op", "op_serial", "op_overlap", "mm_collops", "mm_gloo", "product", "mm")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def _op(rank, world, **extra):
    return spawned_ranks.lccl_operation(
        "LinearParallelOperation", rank, world, "linear-bench", **extra
    )


def _paths(rank, world, dtype, m, k, n, gloo):
    gen = torch.Generator().manual_seed(rank)
    x = (torch.rand(m, k, generator=gen) - 0.5).to(dtype)
    w = (torch.rand(n, k, generator=gen) - 0.5).to(dtype)
    y = torch.empty(m, n, dtype=dtype)
    p = torch.empty(m, n, dtype=dtype)
    linear = _op(rank, world)
    pure = _op(rank, world, type=3)

    def run_op(algo):
        def call():
            os.environ["COLLOPS_ALGO_LINEARPARALLEL"] = algo
            linear.execute_out([x, w], [y])

        return call

    def mm_then(group):
        def call():
            torch.matmul(x, w.t(), out=p)
            dist.all_reduce(p, group=group)

        return call

    return {
        "op": run_op("auto"),
        "op_serial": run_op("serial"),
        "op_overlap": run_op("overlap"),
        "mm_collops": mm_then(None),
        "mm_gloo": mm_then(gloo),
        "product": lambda: pure.execute_out([x, w], [y]),
        "mm": lambda: torch.matmul(x, w.t(), out=p),
    }


def _timed_rounds(calls, rounds):
    """Each call once to warm up (primitives, communicators, pages), then `rounds` rounds that
    time every call once in turn, each after a barrier: {path: [ms per round]}."""
    for call in calls.values():
        call()
    times = {path: [] for path in calls}
    for _ in range(rounds):
        for path, call in calls.items():
            dist.barrier()
            start = time.perf_counter()
            call()
            times[path].append((time.perf_counter() - start) * 1e3)
    return times


def _rank(rank, world, store, args, results):
    import collops  # noqa: F401  (OperationTorch, the "collops" backend)

    dist.init_process_group("collops", init_method=f"file://{store}", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    # Both peers compute with the threads OperationTorch gives an lccl rank (or --threads).
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // world))
    rows = []
    for dtype_name in args.dtypes:
        for m in args.ms:
            calls = _paths(rank, world, DTYPES[dtype_name], m, args.k, args.n, gloo)
            rows.append((dtype_name, m, _timed_rounds(calls, args.rounds)))
    os.environ["COLLOPS_ALGO_LINEARPARALLEL"] = "auto"
    quant_rows = [(m, _w8a8_times(rank, world, m, args)) for m in args.ms] if args.w8a8 else []
    results.put((rank, rows, quant_rows))
    dist.destroy_process_group()


QUANT_PATHS = ("w8a8", "bf16")


def _w8a8_times(rank, world, m, args):
    """Times of the W8A8 op and the bfloat16 op at one m, interleaved round by round."""
    gen = torch.Generator().manual_seed(rank)
    k, n = args.k, args.n
    xq = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    wq = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8)
    bias = torch.randint(-1000, 1000, (n,), generator=gen, dtype=torch.int32)
    scale = torch.rand(n, generator=gen) * 1e-4
    x = (torch.rand(m, k, generator=gen) - 0.5).to(torch.bfloat16)
    w = (torch.rand(n, k, generator=gen) - 0.5).to(torch.bfloat16)
    y = torch.empty(m, n, dtype=torch.bfloat16)
    quant = _op(rank, world, quantType=1, outDataType=27)
    plain = _op(rank, world)
    calls = {
        "w8a8": lambda: quant.execute_out([xq, wq, bias, scale], [y]),
        "bf16": lambda: plain.execute_out([x, w], [y]),
    }
    return _timed_rounds(calls, args.rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--ranks", type=int, default=2)
    parser.add_argument("--dtypes", default="bfloat16,float32", type=lambda s: s.split(","))
    parser.add_argument(
        "--ms", default="16,256,2048", type=lambda s: [int(v) for v in s.split(",")]
    )
    parser.add_argument("-k", type=int, default=4096)
    parser.add_argument("-n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per rank (default: CPUs / ranks)"
    )
    parser.add_argument("--w8a8", action="store_true", help="add the W8A8 vs bfloat16 table")
    args = parser.parse_args()
    bad = [d for d in args.dtypes if d not in DTYPES]
    if bad or args.ranks < 1 or args.rounds < 1 or min(args.ms) < 1 or args.threads < 0:
        parser.error(
            f"bad --dtypes {bad}" if bad else "ranks, rounds, m must be >= 1, threads >= 0"
        )
    per_rank = spawned_ranks.run(_rank, args.ranks, args, "linear-bench", join_seconds=120)
    rows = per_rank[0][1]
    print(
        f"# LINEAR_ALL_REDUCE, R={args.ranks}, k={args.k}, n={args.n}; ms per call, median "
        f"over {args.rounds} rounds of the max over ranks"
    )
    print(
        "| dtype | m | "
        + " | ".join(PATHS)
        + " | mm_collops ÷ op | mm_gloo ÷ op | serial ÷ overlap | op_serial ÷ product |"
    )
    print("|---|---|" + "---|" * (len(PATHS) + 4))
    for i, (dtype_name, m, _) in enumerate(rows):
        t = {
            path: spawned_ranks.median_of_max(
                per_rank, lambda r, i=i, path=path: r[1][i][2][path], args.rounds
            )
            for path in PATHS
        }
        cells = " | ".join(f"{t[p]:.2f}" for p in PATHS)
        print(
            f"| {dtype_name} | {m} | {cells} | {t['mm_collops'] / t['op']:.2f}× | "
            f"{t['mm_gloo'] / t['op']:.2f}× | {t['op_serial'] / t['op_overlap']:.2f}× | "
            f"{t['op_serial'] / t['product']:.2f}× |"
        )
    if args.w8a8:
        print(
            f"\n# W8A8 (quantType 1, y bfloat16) vs bfloat16, LINEAR_ALL_REDUCE, R={args.ranks}, "
            f"k={args.k}, n={args.n}; ms per call"
        )
        print("| m | w8a8 | bf16 | bf16 ÷ w8a8 |")
        print("|---|---|---|---|")
        for i, (m, _) in enumerate(per_rank[0][2]):
            t = {
                path: spawned_ranks.median_of_max(
                    per_rank, lambda r, i=i, path=path: r[2][i][1][path], args.rounds
                )
                for path in QUANT_PATHS
            }
            print(f"| {m} | {t['w8a8']:.2f} | {t['bf16']:.2f} | {t['bf16'] / t['w8a8']:.2f}× |")


if __name__ == "__main__":
    main()
