#!/usr/bin/env python3
"""ATB's int8 pipeline (AllToAll, sum, dequantise, AllGather) in an MoE layer, on CPU ranks.

ATB's requirement: a model sends an int8 quantised tensor through AllToAll (int8 on the wire, half
the bytes of float16), sums, dequantises to float16, and AllGathers the result to every rank. Here
that is the combine step of an MoE layer whose experts are spread over the ranks:

  * every rank holds the same G tokens (hidden size H) and the same router: each token goes to
    its top-k of E experts, E/R experts per rank, with gate weights;
  * each rank runs its experts on the tokens routed to them: one row gate·(x @ W_e) per
    (token, expert) pair, in float32;
  * pipeline "int8": per-token int8 quantisation of those rows (scale = max|row| / 127, one float32
    scale per row); AllToAllV of the int8 payload and, beside it, of the scales, to the rank that
    owns the token (token t belongs to rank t // (G/R)); the owner sums each token's dequantised
    rows in float32 and rounds the sum to float16; AllGather of the owners' float16 blocks gives
    every rank the layer's output y [G, H];
  * pipeline "float16": the same with the rows sent as float16 (no scales);
  * pipeline "float32": the same in float32, the reference.
Every rank also computes the exact output in float64 from the same seeds (it can: routing and
experts are deterministic) and reports each pipeline's largest error against it, relative to
max|y|, and its time (median over --repeat runs of the slowest rank). The run fails (exit code
1) when a pipeline's error exceeds what its rounding allows (per element: int8, half a
quantisation step of every row summed, plus float16's rounding of the output; float16, float16's
rounding of every row and of the output; float32, 2^-11 relative as the tests' tolerance) or when
the ranks' outputs differ.

Run (after building the library, see python/collops/README.md):
    python3 examples/python/moe_int8_dispatch.py                # 2 ranks
    python3 examples/python/moe_int8_dispatch.py --ranks 4 --tokens 2048 --hidden 1024
"""

import argparse
import hashlib
import json
import os
import queue
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

# Importing collops registers torch.classes.OperationTorch; the module itself is not used by name.
try:
    import collops  # noqa: F401
except ImportError as first_error:
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
    )
    try:
        import collops  # noqa: F401
    except ImportError:
        raise first_error

PIPELINES = ("int8", "float16", "float32")
WIRE = {"float16": torch.float16, "float32": torch.float32}
DEADLINE_SECONDS = 300


def make_layer(args):
    """The tokens, the router's choice and gates, and the experts' weights: the same on every
    rank (one seed)."""
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.tokens, args.hidden, generator=gen)
    logits = torch.randn(args.tokens, args.experts, generator=gen)
    gates, chosen = torch.topk(torch.softmax(logits, dim=1), args.top_k, dim=1)
    weights = torch.randn(args.experts, args.hidden, args.hidden, generator=gen) / args.hidden**0.5
    return x, chosen, gates, weights


class Routes:
    """Which (token, expert) rows this rank computes and where they go, and which rows it
    receives for its own tokens, in the order the senders send them."""

    def __init__(self, rank, world, chosen, tokens, experts):
        self.own = tokens // world
        owner_of = torch.arange(tokens) // self.own
        expert_rank = chosen // (experts // world)  # [G, k]: the rank hosting each chosen expert

        def rows_of(sender, dest):
            """(token, slot) pairs `sender` computes for tokens of `dest`, in sending order."""
            t, slot = torch.nonzero(
                (expert_rank == sender) & (owner_of[:, None] == dest), as_tuple=True
            )
            return t, slot

        self.send = [rows_of(rank, d) for d in range(world)]
        self.recv = [rows_of(s, rank) for s in range(world)]
        self.send_counts = [len(t) for t, _ in self.send]
        self.recv_counts = [len(t) for t, _ in self.recv]
        # Received rows' tokens, as indices into this rank's block of tokens.
        self.recv_tokens = torch.cat([t for t, _ in self.recv]) - rank * self.own


def expert_rows(routes, x, chosen, gates, weights):
    """This rank's rows gate·(x @ W_e), grouped by destination rank, float32."""
    blocks = []
    for t, slot in routes.send:
        e = chosen[t, slot]
        rows = torch.bmm(x[t].unsqueeze(1), weights[e]).squeeze(1) if len(t) else x[:0]
        blocks.append(rows * gates[t, slot].unsqueeze(1))
    return torch.cat(blocks)


def golden(x, chosen, gates, weights):
    """The layer's output in float64."""
    xd, wd = x.double(), weights.double()
    y = torch.zeros_like(xd)
    for slot in range(chosen.shape[1]):
        e = chosen[:, slot]
        y += gates[:, slot].double().unsqueeze(1) * torch.bmm(xd.unsqueeze(1), wd[e]).squeeze(1)
    return y


def quantise_per_token(rows):
    """int8 rows and their float32 scales: q = round(row / s), s = max|row| / 127."""
    scale = rows.abs().amax(dim=1).clamp_min(1e-30) / 127
    q = torch.round(rows / scale.unsqueeze(1)).clamp_(-127, 127).to(torch.int8)
    return q, scale


class Ops:
    """The collops operations of one rank: AllToAllVV2 (counts as host tensors) and AllGather."""

    def __init__(self, rank, world, routes, hidden):
        param = json.dumps(
            {"rank": rank, "rankSize": world, "backend": "lccl", "commDomain": "moe-int8"}
        )
        self.alltoall = torch.classes.OperationTorch.OperationTorch("AllToAllVV2Operation")
        self.allgather = torch.classes.OperationTorch.OperationTorch("AllGatherOperation")
        for op in (self.alltoall, self.allgather):
            result = json.loads(op.set_param(param))
            if result["result"] != 0:
                raise RuntimeError(f"rank {rank}: set_param failed: {result}")
        self.hidden = hidden

        def host(counts, per_row):
            c = [n * per_row for n in counts]
            d = [sum(c[:j]) for j in range(len(c))]
            return [torch.tensor(c, dtype=torch.int64), torch.tensor(d, dtype=torch.int64)]

        send_c, send_d = host(routes.send_counts, hidden)
        recv_c, recv_d = host(routes.recv_counts, hidden)
        self.rows_counts = [send_c, send_d, recv_c, recv_d]
        self.rows_shape = torch.empty(sum(routes.recv_counts) * hidden, dtype=torch.int8)
        send_c, send_d = host(routes.send_counts, 1)
        recv_c, recv_d = host(routes.recv_counts, 1)
        self.scale_counts = [send_c, send_d, recv_c, recv_d]
        self.scale_shape = torch.empty(sum(routes.recv_counts), dtype=torch.int8)

    def send_rows(self, rows):
        (y,) = self.alltoall.execute([rows.reshape(-1)] + self.rows_counts + [self.rows_shape])
        return y.reshape(-1, self.hidden)

    def send_scales(self, scales):
        (y,) = self.alltoall.execute([scales] + self.scale_counts + [self.scale_shape])
        return y.reshape(-1)

    def gather(self, block):
        (y,) = self.allgather.execute([block])
        return y.reshape(-1, self.hidden)


def run_pipeline(name, ops, routes, rows):
    """One pass of a pipeline: this rank's rows in, every token's float16 (float32 for the
    reference) output out."""
    own = torch.zeros(routes.own, rows.shape[1], dtype=torch.float32)
    if name == "int8":
        q, scale = quantise_per_token(rows)
        got = ops.send_rows(q)
        got_scale = ops.send_scales(scale)
        own.index_add_(0, routes.recv_tokens, got.float() * got_scale.unsqueeze(1))
        return ops.gather(own.to(torch.float16))
    got = ops.send_rows(rows.to(WIRE[name]))
    own.index_add_(0, routes.recv_tokens, got.float())
    return ops.gather(own.to(WIRE[name]))


def error_bounds(routes_all, rows_all, gold):
    """Per element, what each pipeline's rounding allows (see the module's docstring)."""
    quant_step = torch.zeros_like(gold)
    magnitude = torch.zeros_like(gold)
    for routes, rows in zip(routes_all, rows_all):
        start = 0
        for dest, (t, _) in enumerate(routes.send):
            block = rows[start : start + len(t)].double()
            start += len(t)
            half_step = (block.abs().amax(dim=1, keepdim=True) / 127 / 2).expand_as(block)
            quant_step.index_add_(0, t, half_step)
            magnitude.index_add_(0, t, block.abs())
    out16 = gold.abs() * 2.0**-11
    return {
        "int8": 1.001 * quant_step + magnitude * 2.0**-20 + out16 + 1e-6,
        "float16": magnitude * 2.0**-11 + out16 + 1e-6,
        "float32": torch.full_like(gold, 2.0**-11) * gold.abs().clamp_min(1),
    }


def worker(rank, world, args, results):
    torch.set_num_threads(1)
    x, chosen, gates, weights = make_layer(args)
    routes = Routes(rank, world, chosen, args.tokens, args.experts)
    rows = expert_rows(routes, x, chosen, gates, weights)
    ops = Ops(rank, world, routes, args.hidden)
    report = {}
    gold = golden(x, chosen, gates, weights)
    # Every rank's rows, for the error bounds (the same computation each rank did).
    all_routes = [Routes(r, world, chosen, args.tokens, args.experts) for r in range(world)]
    all_rows = [expert_rows(r, x, chosen, gates, weights) for r in all_routes]
    bounds = error_bounds(all_routes, all_rows, gold)
    scale = gold.abs().max().item()
    for name in PIPELINES:
        y = run_pipeline(name, ops, routes, rows)  # also the warm-up
        err = (y.double() - gold).abs()
        times = []
        for _ in range(args.repeat):
            ops.gather(torch.zeros(1, args.hidden, dtype=torch.float16))  # a barrier
            start = time.perf_counter()
            run_pipeline(name, ops, routes, rows)
            times.append((time.perf_counter() - start) * 1e3)
        over = (err > bounds[name]).sum().item()
        digest = hashlib.sha256(y.numpy().tobytes()).hexdigest()
        report[name] = {
            "error": err.max().item() / scale,
            "over": over,
            "times": times,
            "digest": digest,
            "dtype": str(y.dtype).replace("torch.", ""),
        }
    results.put((rank, report))


def next_report(results, procs):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                sys.exit(
                    f"moe_int8_dispatch: a rank failed (exit codes {[p.exitcode for p in procs]})"
                )
    sys.exit(f"moe_int8_dispatch: no report within {DEADLINE_SECONDS} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512, help="G, a multiple of --ranks")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--experts", type=int, default=0, help="E (default: 4 per rank)")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    args.experts = args.experts or 4 * args.ranks
    if args.ranks < 1 or args.tokens % args.ranks or args.experts % args.ranks:
        ap.error("--ranks >= 1 must divide --tokens and --experts")
    if not 1 <= args.top_k <= args.experts or args.hidden < 1 or args.repeat < 1:
        ap.error("need 1 <= --top-k <= experts, --hidden >= 1, --repeat >= 1")
    os.environ.setdefault("COLLOPS_JOB_ID", f"moe-int8-{os.getpid()}-{time.time_ns()}")
    os.environ.setdefault("COLLOPS_TIMEOUT", "60")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(r, args.ranks, args, results)) for r in range(args.ranks)
    ]
    for p in procs:
        p.start()
    try:
        reports = dict(next_report(results, procs) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(f"moe_int8_dispatch: exit codes {[p.exitcode for p in procs]}")
    print(
        f"MoE combine, R={args.ranks}, G={args.tokens} tokens, H={args.hidden}, "
        f"E={args.experts}, top-{args.top_k}; error = max|y - exact| / max|exact|, time = "
        f"median of {args.repeat} runs of the slowest rank"
    )
    failed = []
    for name in PIPELINES:
        per_rank = [reports[r][name] for r in range(args.ranks)]
        t = statistics.median(max(r["times"][i] for r in per_rank) for i in range(args.repeat))
        wire = "int8 + float32 scales" if name == "int8" else name
        print(
            f"  {name:8s} wire {wire:22s} output {per_rank[0]['dtype']:8s} "
            f"error {per_rank[0]['error']:.2e}  time {t:8.3f} ms"
        )
        if any(r["over"] for r in per_rank):
            failed.append(
                f"{name}: {[r['over'] for r in per_rank]} elements per rank beyond "
                "the rounding bound"
            )
        if len({r["digest"] for r in per_rank}) != 1:
            failed.append(f"{name}: the ranks' outputs differ")
    if failed:
        print("moe_int8_dispatch: WRONG: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)
    print("moe_int8_dispatch: every pipeline within its bound, the same output on every rank")


if __name__ == "__main__":
    main()
