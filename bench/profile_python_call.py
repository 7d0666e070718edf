#!/usr/bin/env python3
"""Where one Python call of collops goes: instructions per call of each entry point, split into
argument conversion, output allocation, setup and host counts, the GIL, the agreement round, the
engine, Work objects, and Python with torch's dispatch (the rest).

Instructions, not time: rank 0 runs under valgrind's callgrind, whose counts do not move with the
machine's load, and the other ranks run natively (they wait for rank 0 in every call, so rank 0
finds them there and its own waits stay short). For each path rank 0 zeroes the counts
(--zero-before=getsid) right before `--calls` timed calls and writes them (--dump-before=getpgrp)
right after; callgrind_annotate's inclusive counts of the functions listed in CATEGORIES then
give each part. Paths and their set-up are bench/python_paths.py's (bench/pypaths/rank_calls.py);
DeepSpeed's (deepspeed, ds_kernel) only when --paths names them, and the shared-memory files its
kernel leaves behind are removed at the end.

    python3 bench/profile_python_call.py                       # R=2, float32 all_reduce 4 KiB
    python3 bench/profile_python_call.py --op allgather --size 65536 --keep /tmp/cg
    python3 bench/profile_python_call.py --paths ops,dist,ds_kernel    # against DeepSpeed's kernel
Needs valgrind and `import collops` (the torch binding, README.md).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PATHS = ["execute", "execute_torch", "execute_out", "ops", "ops_", "dist", "noop"]
#: Paths that need DeepSpeed (bench/python_paths.py's), profiled only when asked for by --paths.
DS_PATHS = ["deepspeed", "ds_kernel"]

# Each part of a call: the functions whose inclusive instructions make it up (regular
# expressions matched against callgrind_annotate's function names), minus those of `minus`
# (parts nested inside them that belong to another part). The rest of a call, its total minus
# every part, is the Python interpreter and torch's own dispatch (pybind11, the c10 dispatcher,
# torch.distributed's Python wrappers).
CATEGORIES = [
    (
        "argument conversion",
        {
            "plus": [
                r"torch::jit::createStackForSchema\(",
                r"torch::jit::toPyObject\(",
                r"pybind11::detail::list_caster<std::vector<at::Tensor",
                r"pybind11::detail::type_caster<at::Tensor",
                r"THPVariable_Wrap\(",
                r"collops::\(anonymous namespace\)::TensorsOf\(",
            ],
            "minus": [],
        },
    ),
    (
        "output allocation",
        {
            "plus": [
                r"collops::\(anonymous namespace\)::OperationTorch::AllocateOutputs\(",
                r"collops::OperationTorch::AllocateOutputs\(",
                r"THPVariable_dealloc\(",
                r"collops::ops_kernels::NewOutput",
            ],
            "minus": [],
        },
    ),
    (
        "setup and host counts",
        {
            "plus": [
                r"collops::OperationBase::Setup\(",
                r"collops::OperationBase::Execute\(",
                r"OperationTorch::Prepare\(",
                r"OperationTorch::SetupOp\(",
            ],
            # Execute's data movement and agreement are parts of their own.
            "minus": [
                r"collops::AllReduceOperation::ExecuteImpl\(",
                r"collops::AllGatherOperation::ExecuteImpl\(",
                r"collops::shm::ProcessCommunicator::Agree\(",
                r"collops::AllReduceOperation::SignatureImpl\(",
                r"collops::AllGatherOperation::SignatureImpl\(",
            ],
        },
    ),
    (
        "GIL",
        {
            "plus": [
                r"^PyEval_SaveThread$",
                r"^PyEval_RestoreThread$",
                r"^PyGILState_Ensure$",
                r"^PyGILState_Release$",
            ],
            "minus": [],
        },
    ),
    (
        "agreement",
        {
            "plus": [
                r"collops::shm::ProcessCommunicator::Agree\(",
                r"collops::shm::Transport::CheckCarriedAgreement\(",
                r"collops::AllReduceOperation::SignatureImpl\(",
                r"collops::AllGatherOperation::SignatureImpl\(",
                r"collops::VerifiedCommunicator::Signature",
            ],
            "minus": [],
        },
    ),
    (
        "engine",
        {
            "plus": [
                r"collops::shm::ProcessCommunicator::AllReduce\(",
                r"collops::shm::ProcessCommunicator::AllGatherBytes\(",
                r"collops::shm::ProcessCommunicator::AllGatherV\(",
                # DeepSpeed's shared-memory kernel (ds_kernel, deepspeed): all of it, as it has
                # no agreement round.
                r"^inference_all_reduce_\(at::Tensor&, int\)",
            ],
            "minus": [r"collops::shm::Transport::CheckCarriedAgreement\("],
        },
    ),
    (
        "Work and future",
        {
            "plus": [
                r"collops::CompletedWork::",
                r"c10d::Work::Work\(",
                r"c10d::Work::~Work\(",
                r"c10::ivalue::Future::markCompleted",
                r"c10d::Work::wait\(",
                r"collops::CompletedWork::wait",
                r"c10d::FakeWork",
            ],
            "minus": [],
        },
    ),
]
# Spinning for the peers: collops' waits, and DeepSpeed's, which spins without sleeping, so its
# count grows with the time rank 1 takes to arrive (the machine's load).
WAIT_FUNCTIONS = [
    r"collops::shm::Transport::WaitAll\(",
    r"collops::shm::WaitWord::Wait",
    r"^wait_buffer_state_until",
]


def inclusive_counts(dump):
    """{function name: inclusive instructions} from callgrind_annotate, the pieces of a function
    that inlining put in other files (headers) added up. Run from the dump's directory and without
    source annotation: where it finds the sources (from a checkout's root), callgrind_annotate
    lists a function under its relative and its absolute path and repeats call lines in the
    annotation, which would count it two or three times."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", dump],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.abspath(dump)),
    ).stdout
    counts = {}
    for line in out.splitlines():
        m = re.match(r"\s*([0-9,]+) \([ 0-9.]+%\)\s+(\S.*?)(?: \[[^\]]*\])?$", line)
        if not m:
            continue
        name = m[2].split(":", 1)[1] if re.match(r"^[^ (]*:", m[2]) else m[2]
        counts[name] = counts.get(name, 0) + int(m[1].replace(",", ""))
    return counts


def total_of(dump):
    with open(dump) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals")


def matched(counts, patterns):
    """Sum of the inclusive counts of every function matching one of `patterns`."""
    regexes = [re.compile(p) for p in patterns]
    return sum(c for name, c in counts.items() if any(r.search(name) for r in regexes))


def split(counts, total, calls):
    """[(part, instructions per call)], the rest last."""
    parts, used = [], 0
    for name, spec in CATEGORIES:
        n = matched(counts, spec["plus"]) - matched(counts, spec["minus"])
        n = max(n, 0)
        parts.append((name, n / calls))
        used += n
    parts.append(("Python and torch's dispatch (the rest)", max(total - used, 0) / calls))
    return parts


# ---- the ranks ---------------------------------------------------------------------------------


def worker(args):
    """One rank: every path's warm-up and timed calls; rank 0 brackets the timed ones with the
    marker calls callgrind watches."""
    from pypaths.rank_calls import Row
    from pypaths.ranks import RankEnv

    rank, world = args.worker, args.ranks
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_SIZE=str(world)
    )
    paths = args.paths.split(",")
    env = RankEnv(rank, world, args.store, use_ds=any(p in DS_PATHS for p in paths))
    import torch.distributed as dist

    row = Row(env, args.op, args.dtype, args.size)
    for path in paths:
        fn = row.calls[path]
        for _ in range(args.warmup):
            fn()
        dist.barrier()
        if rank == 0:
            os.getsid(0)  # callgrind: zero the counts
        for _ in range(args.calls):
            fn()
        if rank == 0:
            os.getpgrp()  # callgrind: dump the counts of this path
        dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--op", default="allreduce", choices=["allreduce", "allgather"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--size", type=int, default=4096, help="bytes (as bench/python_paths.py)")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--keep", help="keep callgrind's dumps in this directory")
    ap.add_argument("--json", action="store_true", help="print the parts as one JSON line")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        sys.exit("profile_python_call: needs valgrind (callgrind) and callgrind_annotate")
    out_dir = args.keep or tempfile.mkdtemp(prefix="collops-profile-")
    os.makedirs(out_dir, exist_ok=True)
    store = os.path.join(out_dir, f"store-{os.getpid()}")
    env = dict(
        os.environ,
        COLLOPS_TIMEOUT="3600",
        OMP_NUM_THREADS="1",
        COLLOPS_JOB_ID=f"profile-{os.getpid()}",
        # DeepSpeed's paths: its CPU accelerator, its rendezvous (deepspeed.init_distributed).
        DS_ACCELERATOR="cpu",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(20000 + os.getpid() % 20000),
    )
    # The interpreter itself (pyenv's python3 is a shell script valgrind would follow instead).
    python = os.path.realpath(sys.executable)
    me = os.path.abspath(__file__)
    common = [
        "--ranks",
        str(args.ranks),
        "--op",
        args.op,
        "--dtype",
        args.dtype,
        "--size",
        str(args.size),
        "--paths",
        args.paths,
        "--calls",
        str(args.calls),
        "--warmup",
        str(args.warmup),
        "--store",
        store,
    ]
    out_file = os.path.join(out_dir, "callgrind.%p")
    # DeepSpeed's kernel leaves a shared-memory file per rank behind: removed at the end.
    from pypaths.deepspeed_peer import ds_segments, remove_ds_segments

    uses_ds = any(p in DS_PATHS for p in args.paths.split(","))
    segments = ds_segments(args.ranks, env["MASTER_ADDR"], env["MASTER_PORT"]) if uses_ds else []
    existed = {p for p in segments if os.path.exists(p)}
    procs = [
        subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--zero-before=getsid",
                "--dump-before=getpgrp",
                f"--callgrind-out-file={out_file}",
                python,
                me,
                "--worker",
                "0",
            ]
            + common,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
    ]
    procs += [
        subprocess.Popen([python, me, "--worker", str(r)] + common, env=env)
        for r in range(1, args.ranks)
    ]
    started = time.time()
    try:
        codes = [p.wait(timeout=3600) for p in procs]
    finally:
        for path in remove_ds_segments(segments, existed):
            print(f"profile_python_call: removed DeepSpeed's {path}", file=sys.stderr)
    stderr = procs[0].stderr.read()
    if any(codes):
        sys.exit(f"profile_python_call: ranks exited with {codes}\n{stderr[-2000:]}")
    pid = procs[0].pid
    paths = args.paths.split(",")
    dumps = [os.path.join(out_dir, f"callgrind.{pid}.{i + 1}") for i in range(len(paths))]
    table = {}
    for path, dump in zip(paths, dumps):
        counts = inclusive_counts(dump)
        total = total_of(dump)
        table[path] = {
            "total": total / args.calls,
            "parts": split(counts, total, args.calls),
            "waiting": matched(counts, WAIT_FUNCTIONS) / args.calls,
        }
    if args.json:
        print(json.dumps({"args": vars(args), "table": table}))
    else:
        parts = [p for p, _ in table[paths[0]]["parts"]]
        print(
            f"# instructions per call, {args.op} {args.dtype} {args.size} B, R={args.ranks}, "
            f"rank 0 under callgrind, {args.calls} calls per path "
            f"({time.time() - started:.0f} s)"
        )
        print("| part | " + " | ".join(paths) + " |")
        print("|---|" + "---|" * len(paths))
        for i, part in enumerate(parts):
            print(
                f"| {part} | " + " | ".join(f"{table[p]['parts'][i][1]:,.0f}" for p in paths) + " |"
            )
        print("| **total** | " + " | ".join(f"**{table[p]['total']:,.0f}**" for p in paths) + " |")
        print(
            "| (of the engine: waiting for the peer) | "
            + " | ".join(f"{table[p]['waiting']:,.0f}" for p in paths)
            + " |"
        )
        print(
            "| total without the waiting | "
            + " | ".join(f"{table[p]['total'] - table[p]['waiting']:,.0f}" for p in paths)
            + " |"
        )
    if not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
