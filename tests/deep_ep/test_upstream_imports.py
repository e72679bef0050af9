"""Upstream's import paths and entry points: ``deep_ep.utils.{refs, envs, gate, testing}``, the
top-level domain-size queries taking a group, ``destroy_all_managed_*_comm`` and V2.5's
``barrier(wait_comm_stream=...)``; ``utils.refs`` agrees bit for bit with the buffers."""
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

H, E, K, M = 128, 8, 3, 16


def _ranks(rank, world):
    import deep_ep
    from deep_ep.utils import envs, refs
    group = dist.group.WORLD
    envs.init_seed(7)
    assert (envs.get_global_seed(), envs.get_local_seed()) == (7, 7 + rank)
    envs.check_torch_deterministic()
    assert deep_ep.get_physical_domain_size(group) == envs.get_physical_domain_size(group) == (1, world)
    assert deep_ep.get_logical_domain_size(group) == deep_ep.comm.get_logical_domain_size(group, True) == (1, world)

    buf = deep_ep.EPBuffer(group, num_max_tokens_per_rank=M, hidden=H, num_topk=K, explicitly_destroy=True)
    assert deep_ep.get_physical_domain_size(buf) == buf.get_physical_domain_size() == (1, world)
    buf.barrier(wait_comm_stream=False)
    buf.barrier(True, False, True)
    T = M - 3 * rank
    topk_idx = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    topk_idx[torch.rand(T, K, dtype=torch.float32) < 0.2] = -1
    topk_weights = torch.rand(T, K, dtype=torch.float32)
    x = torch.randn(T, H, dtype=torch.float32).bfloat16()

    # refs.dispatch: rows sorted by src_token_global_idx, local expert ids, the whole weight rows.
    recv_x, recv_idx, recv_w, src, per_rank = refs.dispatch(x, topk_idx, topk_weights, M, E)
    got_x, got_idx, got_w, handle, _ = buf.dispatch(x, topk_idx, topk_weights, num_experts=E)
    assert torch.equal(got_x, recv_x) and torch.equal(got_idx, recv_idx)
    assert torch.equal(got_w, torch.where(recv_idx >= 0, recv_w, got_w))
    assert torch.equal(handle.recv_src_metadata[:, 0], src) and int(per_rank.sum()) == got_x.shape[0]

    # refs.combine of upstream's synthetic expert outputs vs the buffer's expanded combine.
    bias = torch.randn(T, H, dtype=torch.float32).bfloat16()
    mine = refs.generate_pre_combine_data(rank * M + torch.arange(T), M, K, H)      # [T, K, H]
    mine = torch.where((topk_idx >= 0)[:, :, None], mine, 0)                            # unused slots add nothing
    expect = refs.combine(mine, topk_idx, 1, world, E, bias, True, False)
    ex_x, _, _, ex_handle, _ = buf.dispatch(x, topk_idx, num_experts=E, do_expand=True)
    meta = ex_handle.recv_src_metadata[: ex_handle.num_recv_tokens]
    pre = refs.generate_pre_combine_data(meta[:, 0], M, K, H)
    y = torch.zeros_like(ex_x)
    for k in range(K):
        rows = meta[:, 2 + k] >= 0
        y[meta[rows, 2 + k].long()] = pre[rows, k]
    combined, _, _ = buf.combine(y, ex_handle, bias=bias)
    assert torch.equal(combined, expect)
    buf.destroy()

    bucket = deep_ep.BucketBuffer(group, 1 << 16, explicitly_destroy=True)
    bucket.barrier(wait_comm_stream=True, with_cpu_sync=False, sequential=True)
    bucket.destroy()
    deep_ep.destroy_all_managed_nccl_comm()
    deep_ep.comm.destroy_all_managed_hccl_comm()
    return True


def test_envs_refs_and_domains_across_ranks():
    assert run_ranks(_ranks, 2) == [True, True]


def test_refs_combine_reduces_groups_at_their_last_slot():
    from deep_ep.utils import refs
    # Token routed to ranks [0, 1, 0] (experts 0, 2, 1 of 4 on 2 ranks): rank 0's slots sum into
    # slot 2, so the order is bias, rank 1 (slot 1), rank 0 (slot 2).
    tiny = 2.0 ** -24
    y = torch.tensor([[tiny, -1.0, 0.0]]).bfloat16()[:, :, None].expand(1, 3, 4).contiguous()
    bias = torch.ones(1, 4, dtype=torch.float32).bfloat16()
    out = refs.combine(y, torch.tensor([[0, 2, 1]]), 1, 2, 4, bias, True, False)
    assert torch.equal(out, torch.full((1, 4), tiny).bfloat16())
    assert torch.equal(refs.ordered_accumulate(y, bias.float()), torch.zeros(1, 4, dtype=torch.float32).bfloat16())


def test_gate_routes_ratio_times_more_tokens_to_rank_0():
    from deep_ep.utils import gate
    torch.manual_seed(0)
    T, E_, R, K_, ratio = 2048, 64, 4, 4, 2.0
    counts = gate.generate_rank_count(T, E_, R, K_, ratio)
    assert bool((counts.sum(1) == K_).all())
    idx = gate.generate_topk_idx(counts, T, E_, R, K_)
    assert torch.equal(torch.stack([((idx // (E_ // R)) == r).sum(1) for r in range(R)], 1).int(), counts)
    assert bool((idx.sort(1).values.diff(1) != 0).all())
    for precise in (True, False):
        top = gate.get_unbalanced_scores(T, E_, R, K_, ratio, precise).topk(K_).indices // (E_ // R)
        hits = torch.stack([(top == r).any(1).sum() for r in range(R)]).float()
        assert 1.6 < float(hits[0] / hits[1:].mean()) < 2.5, hits


def test_testing_bench_and_silencer(capfd):
    from deep_ep.utils import testing
    avg, low, high = testing.bench(lambda: torch.ones(64, dtype=torch.float32).sum(), num_warmups=2, num_tests=5, flush_l2=False)
    assert 0 < low <= avg <= high
    with testing.suppress_stdout_stderr():
        print("hidden")
    with testing.empty_suppress():
        print("shown")
    assert capfd.readouterr().out == "shown\n"


def test_envs_link_queries(monkeypatch, tmp_path):
    """Upstream's link queries: the NIC rate from ``ibstat`` (parsed as upstream), else the
    nominal figure upstream's PP test can divide by; no NVLink; fast RDMA atomics on MT4131 only."""
    from deep_ep.utils import envs
    envs.check_nvlink_connections(None)
    for fn in (envs.get_rdma_gbs, envs.get_nvlink_gbs, envs.check_fast_rdma_atomic_support):
        fn.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))   # no ibstat
    assert envs.get_rdma_gbs() == 12.5 and envs.get_nvlink_gbs() == 0.0
    assert envs.check_fast_rdma_atomic_support() is False
    ibstat = tmp_path / "ibstat"
    ibstat.write_text("#!/bin/sh\nprintf \"CA 'mlx5_0'\\n\\tCA type: MT4131\\n\\tPort 1:\\n\\t\\tState: Active\\n"
                      "\\t\\tRate: 400\\n\"\n")
    ibstat.chmod(0o755)
    envs.get_rdma_gbs.cache_clear()
    envs.check_fast_rdma_atomic_support.cache_clear()
    assert envs.get_rdma_gbs("mlx5_0") == 50.0 and envs.check_fast_rdma_atomic_support("mlx5_0") is True
    assert envs.get_rdma_gbs("mlx5_1") == 12.5
    for fn in (envs.get_rdma_gbs, envs.check_fast_rdma_atomic_support):
        fn.cache_clear()


def test_bench_kineto_shapes_as_upstream():
    """A name per kernel; with several kernels per period (upstream's LL hook profiling indexes
    ``dispatch_t[0]`` and ``[1]``) each name gets one duration per kernel of the period."""
    from deep_ep.utils.testing import bench_kineto
    calls = []
    single = bench_kineto(lambda: calls.append(1), "k", num_tests=3, flush_l2=False)
    pair = bench_kineto(lambda: calls.append(1), ("a", "b"), num_tests=3, flush_l2=False)
    hooked = bench_kineto(lambda: calls.append(1), ("a", "b"), num_tests=3, flush_l2=False, num_kernels_per_period=2)
    assert isinstance(single, float) and single > 0 and len(calls) == 9
    assert isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(t, float) for t in pair)
    assert len(hooked) == 2 and all(isinstance(t, list) and len(t) == 2 and t[0] > 0 for t in hooked)


def test_ibstat_fields_come_from_the_named_card_only():
    from deep_ep.utils.envs import ibstat_field
    out = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Down\n"
           "CA 'mlx5_1'\n\tCA type: MT4131\n\tPort 1:\n\t\tState: Active\n\t\tRate: 400\n")
    assert ibstat_field(out, "mlx5_0", "CA type") == "MT4129"
    assert ibstat_field(out, "mlx5_0", r"Port \d+:\s*.*?Rate") is None   # not mlx5_1's rate
    assert ibstat_field(out, "mlx5_1", r"Port \d+:\s*.*?Rate") == "400"
    assert ibstat_field(out, "mlx5_2", "CA type") is None
