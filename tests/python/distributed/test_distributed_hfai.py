"""collops.distributed (hfai.distributed's API): hfai's documented examples
(examples/python/hfai_distributed.py) reproduced exactly, uneven tensor helpers, pairwise_apply
with differing shapes, and the Store-backed object collectives."""

import torch
import torch.distributed as dist

from c10d_ranks import run_group_job


def _seed_all_gather(ctx):
    # hfai's all_gather example, verbatim (2 ranks).
    import collops.distributed as cdist

    rank = ctx.rank
    tensor_list = [torch.zeros(2 + i, dtype=torch.int64) for i in range(2)]
    tensor = torch.arange(2 + rank, dtype=torch.int64) + 1 + 2 * rank
    cdist.all_gather(tensor_list, tensor)
    return [t.tolist() for t in tensor_list]


def test_seed_uneven_all_gather():
    assert run_group_job(2, _seed_all_gather) == [[[1, 2], [3, 4, 5]]] * 2


def _four_ranks(ctx):
    import collops.distributed as cdist

    rank, world = ctx.rank, ctx.world_size
    out = {}
    # hfai's pairwise_apply example: f = x + y, x = ones(1) * rank, 4 ranks.
    x = torch.ones(1) * rank
    out["pairwise"] = [t.item() for t in cdist.pairwise_apply(lambda a, b: a + b, x)]
    # Shapes that differ per rank (same number of dims), extra args.
    y = torch.full((rank + 1, 2), float(rank))
    res = cdist.pairwise_apply(lambda a, b, k: torch.cat([a, b]) * k, y, args=(2,))
    for j, r in enumerate(res):
        assert torch.equal(r, torch.cat([y, torch.full((j + 1, 2), float(j))]) * 2)
    same = cdist.pairwise_apply(torch.sub, torch.full((3,), float(rank)), equal_size=True)
    assert [t.tolist() for t in same] == [[float(rank - j)] * 3 for j in range(world)]

    # Uneven reduce_scatter (list form): input_list[j] has j+1 elements.
    ins = [torch.full((j + 1,), float(rank + 1)) for j in range(world)]
    o = torch.empty(rank + 1)
    cdist.reduce_scatter(o, ins)
    assert torch.equal(o, torch.full((rank + 1,), float(sum(range(1, world + 1)))))
    # Equal sizes take torch's own path (async_op allowed).
    ins = [torch.full((2,), float(rank)) for _ in range(world)]
    o = torch.empty(2)
    cdist.reduce_scatter(o, ins, async_op=True).wait()
    assert torch.equal(o, torch.full((2,), float(sum(range(world)))))

    # torch_npu's tensor forms: rank r contributes r+1 rows.
    splits = [r + 1 for r in range(world)]
    gathered = torch.empty(sum(splits), 2)
    cdist.all_gather_into_tensor_uneven(gathered, torch.full((rank + 1, 2), float(rank)), splits)
    assert torch.equal(
        gathered, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(world)])
    )
    part = torch.empty(rank + 1, 2)
    cdist.reduce_scatter_tensor_uneven(
        part, torch.arange(sum(splits) * 2.0).view(-1, 2), splits, op=dist.ReduceOp.MAX
    )
    start = sum(splits[:rank])
    assert torch.equal(part, torch.arange(sum(splits) * 2.0).view(-1, 2)[start : start + rank + 1])
    even = torch.empty(2)
    cdist.reduce_scatter_tensor_uneven(even, torch.ones(2 * world))
    assert torch.equal(even, torch.full((2,), float(world)))

    # Object collectives over the store.
    cdist.barrier()
    objs = [{"from": rank}] if rank == 2 else [None]
    cdist.broadcast(objs, src=2)
    assert objs == [{"from": 2}]
    gl = [] if rank == 0 else None
    cdist.gather(("rank", rank), gl, dst=0)
    if rank == 0:
        assert gl == [("rank", r) for r in range(world)]
    cdist.barrier()
    try:
        cdist.all_gather(
            [torch.empty(1), torch.empty(2), torch.empty(1), torch.empty(1)],
            torch.empty(1 if rank != 1 else 2),
            async_op=True,
        )
    except ValueError as e:
        assert "equal sizes" in str(e)
    else:
        raise AssertionError("uneven async all_gather did not raise")
    return out


def test_four_ranks_pairwise_uneven_and_objects():
    results = run_group_job(4, _four_ranks)
    # As hfai documents: rank r gets [r, r+1, r+2, r+3].
    assert [r["pairwise"] for r in results] == [[float(r + j) for j in range(4)] for r in range(4)]


def _torch_npu_uneven(ctx):
    # torch_npu's documentation example for all_gather_into_tensor_uneven (and
    # reduce_scatter_tensor_uneven), through the shim's torch_npu.distributed, with async_op.
    import collops
    import collops.distributed as cdist

    torch_npu = collops.compat.install_torch_npu()
    import torch_npu.distributed as npu_dist  # the import form works too

    assert npu_dist is torch_npu.distributed
    rank, world = ctx.rank, ctx.world_size
    splits = [2, 3]
    inputs = [torch.tensor([1, 2], dtype=torch.int32), torch.tensor([4, 5, 6], dtype=torch.int32)]
    gold = torch.cat(inputs)
    out = torch.zeros(sum(splits), dtype=torch.int32)
    assert (
        npu_dist.all_gather_into_tensor_uneven(
            out, inputs[rank], output_split_sizes=splits, async_op=False
        )
        is None
    )
    assert torch.equal(out, gold), out
    out = torch.zeros(sum(splits), dtype=torch.int32)
    work = cdist.all_gather_into_tensor_uneven(out, inputs[rank], splits, None, True)
    assert work.wait() and torch.equal(out, gold) and work.is_completed()
    assert torch.equal(work.get_future().value()[0], gold)

    # reduce_scatter: rank r's input is (r + 1) * arange(5); rank r gets rows of split r.
    x = torch.arange(5.0) * (rank + 1)
    summed = torch.arange(5.0) * sum(r + 1 for r in range(world))
    start = sum(splits[:rank])
    part = torch.empty(splits[rank])
    assert (
        npu_dist.reduce_scatter_tensor_uneven(
            part, x, input_split_sizes=splits, op=dist.ReduceOp.SUM, async_op=False
        )
        is None
    )
    assert torch.equal(part, summed[start : start + splits[rank]]), part
    part = torch.empty(splits[rank])
    work = cdist.reduce_scatter_tensor_uneven(part, x, splits, dist.ReduceOp.MAX, None, True)
    assert work.wait()
    assert torch.equal(part, (torch.arange(5.0) * world)[start : start + splits[rank]]), part
    return "ok"


def test_torch_npu_uneven_collectives_take_async_op():
    assert run_group_job(2, _torch_npu_uneven) == ["ok"] * 2


def _objects_on_a_subgroup(ctx):
    import collops.distributed as cdist

    rank = ctx.rank
    sub = dist.new_group([0, 2])
    store = dist.distributed_c10d._get_default_store()
    cdist.barrier()
    keys_before = store.num_keys()
    for step in range(30):
        if rank == 1:  # not a member: every call returns at once, as torch's for non-members
            assert cdist.barrier(group=sub) is None
            continue
        work = cdist.barrier(group=sub, async_op=True)
        assert work.wait()
        objs = [("payload", step, "x" * 1000)] if rank == 2 else [None]
        cdist.broadcast(objs, src=2, group=sub)
        assert objs == [("payload", step, "x" * 1000)]
        gl = [] if rank == 0 else None
        cdist.gather(rank * 10 + step, gl, dst=0, group=sub)
        if rank == 0:
            assert gl == [step, 20 + step]
    cdist.barrier()
    grown = store.num_keys() - keys_before
    try:
        cdist.broadcast([None], src=1, group=sub)
    except ValueError as e:
        bad_src = str(e)
    else:
        bad_src = None if rank == 1 else "no error"
    return grown, bad_src


def test_object_collectives_honour_the_group_and_leave_no_keys():
    results = run_group_job(3, _objects_on_a_subgroup)
    # 30 rounds of three object collectives: each deletes its keys once every rank is done
    # (only the four keys of the last world barrier may still be there: rank 0 deletes them
    # after the others have left it).
    assert all(grown <= 4 for grown, _ in results), results
    assert results[0][1] == results[2][1]
    assert "rank 1 is not in the group" in results[0][1]
    assert results[1][1] is None
