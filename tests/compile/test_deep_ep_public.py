"""deep_ep under ``torch.compile(fullgraph=True)``: its module-level helpers trace (plain Python constants feeding
tensor code). Excluded, with upstream: every buffer (``Buffer``, ``EPBuffer``, ``ElasticBuffer``, ``BucketBuffer``,
``EngramBuffer``, ``PPBuffer``) and its dispatch/combine, which communicate between ranks through a shared window and
``torch.distributed`` and return host-side handles and per-rank counts read back from the device; upstream's are
pybind11 calls that Dynamo does not trace either, and vLLM / SGLang run them outside their compiled regions."""
import torch

import deep_ep


def test_alignment_helpers_trace():
    def f(x):
        width = max(deep_ep.get_num_tma_alignment(), deep_ep.get_num_rdma_alignment()) // x.element_size()
        padded = torch.nn.functional.pad(x, (0, (-x.shape[-1]) % width))
        return padded, torch.full((1,), deep_ep.get_num_allocation_alignment(), dtype=torch.int64)

    x = torch.randn(3, 7)
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    want = f(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[0].shape == (3, 8)
