"""The reference path (the one NPU tensors take) keeps every tensor on its inputs' device: run on
an emulated device (``emulated_device``) that fails any op mixing device and CPU tensors, it gives
the same results as on the CPU."""
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from . import refs
from .emulated_device import emulated_device, on_device, to_cpu

H, E, K, T = 128, 8, 3, 12


def _check_device(tensors, device):
    for i, t in enumerate(tensors):
        if t is not None:
            assert t.device.type == ("meta" if device else "cpu"), f"output {i} is on {t.device}"


def _run(rank, world, device):
    import deep_ep
    wrap = on_device if device else (lambda t: t)
    idx, w = refs.make_routing(T, K, E, seed=rank)
    x = refs.make_x(T, H, seed=rank)
    bias = refs.make_x(T, H, seed=9 + rank)
    out = {}
    with emulated_device():
        buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=T, hidden=H, num_topk=K,
                               explicitly_destroy=True)
        stats = wrap(torch.zeros(E // world, dtype=torch.int32))
        for expand in (False, True):
            recv_x, recv_idx, recv_w, handle, _ = buf.dispatch(wrap(x), wrap(idx), wrap(w), stats, num_experts=E,
                                                               do_expand=expand, do_zero_padding=expand,
                                                               expert_alignment=2)
            y, yw, _ = buf.combine(recv_x, handle, recv_w, bias=wrap(bias))
            got = [recv_x, recv_idx, recv_w, handle.psum_num_recv_tokens_per_expert,
                   handle.psum_num_recv_tokens_per_scaleup_rank, handle.recv_src_metadata, y, yw]
            _check_device(got, device)
            out[expand] = [to_cpu(t) for t in got]
        out["stats"] = to_cpu(stats)
        buf.destroy()
        legacy = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                                explicitly_destroy=True)
        layout = legacy.get_dispatch_layout(wrap(idx), E)
        _check_device(layout[:4], device)
        out["layout"] = [to_cpu(t) for t in layout[:4]]
        legacy.destroy()
    return {k: [None if t is None else t.tolist() for t in v] if isinstance(v, list) else v.tolist()
            for k, v in out.items()}


def _both(rank, world):
    return _run(rank, world, False), _run(rank, world, True)


def test_reference_path_stays_on_the_inputs_device():
    for on_cpu, on_dev in run_ranks(_both, 2, env={"EP_BACKEND": "reference"}):
        assert on_dev == on_cpu
