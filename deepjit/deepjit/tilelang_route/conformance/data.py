"""Input helpers shared by the conformance cases: seeded random tensors, sentinel-filled outputs and
the special values every conversion must get right."""
import torch

SENTINEL_BYTE = 0xA5  # an output element the kernel never writes keeps this byte pattern


def sentinel(shape, dtype) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(SENTINEL_BYTE)
    return t


def randn(gen, shape, dtype=torch.float32, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def randint(gen, shape, low, high, dtype=torch.int32) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)


def f32_from_bits(bits) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


def special_f32(n: int, gen, scale: float) -> torch.Tensor:
    """n float32 values: random values at ``scale`` plus, at the front, the cases a conversion can get
    wrong: +-0, +-Inf, NaN, values beyond the target's range, subnormals of float32, and exact ties
    that round-to-nearest-even must break towards the even neighbour."""
    special = torch.cat([
        torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")]),
        f32_from_bits([0x00000001, 0x80000010, 0x007FFFFF]),  # float32 subnormals
        torch.tensor([1e30, -1e30, 3.0e38, -3.0e38, 65504.0, 65520.0, 65536.0, -70000.0,  # fp16 edge
                      448.0, 464.0, 480.0, -500.0, 57344.0, 61440.0, 1e5, -1e5,            # fp8 edges
                      6.0, 7.0, -8.0, 0.25, 0.75, 1.25, 2.5, 3.5, 5.0,                      # e2m1 ties
                      1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -(1.0 + 2.0 ** -8),              # bf16 ties
                      1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,                                # fp16 ties
                      1.0625, 1.1875, 0.001953125, 2.0 ** -10, 2.0 ** -17, 2.0 ** -20,       # fp8 ties/subnormals
                      6.0e-8, -3.0e-8, 1e-40]),
    ])
    rest = torch.randn(n - special.numel(), generator=gen) * scale
    return torch.cat([special, rest])
