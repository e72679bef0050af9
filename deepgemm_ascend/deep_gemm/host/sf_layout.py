"""Scale-factor layout transforms at memory speed (kernel in host/sf_layout.cpp)."""
from __future__ import annotations

import torch

from deepjit import descriptors

from ._lib import LIB, kernel, threads


def _strides3(prefix: str, x: torch.Tensor) -> dict:
    return {f"{prefix}_b": x.stride(0) if x.dim() == 3 else 0, f"{prefix}_mn": x.stride(-2), f"{prefix}_k": x.stride(-1)}


def _run(mode: int, src: torch.Tensor, out: torch.Tensor, mn: int, sk: int, words: int, gran: int, per_word: int,
         num_threads) -> None:
    batch = out.size(0) if out.dim() == 3 else 1
    if batch == 0 or mn == 0:
        return
    args = descriptors.pack(descriptors.struct_type(LIB.source("host/sf_layout_args.hpp"), "SfLayoutArgs"),
                            mode=mode, batch=batch, mn=mn, sk=sk, words=words, gran=gran, **_strides3("in", src),
                            **_strides3("out", out), per_word=per_word)
    kernel("dg_sf_layout", "host/sf_layout.cpp")(descriptors.address(args), src, out, threads(num_threads))


def transpose_sf(sf: torch.Tensor, out: torch.Tensor, gran_mn: int = 1, num_threads: int | None = None) -> None:
    """Copy FP32 ``sf [B?, ceil(MN/gran_mn), SK]`` into ``out [B?, MN, SK]`` (any strides, e.g. MN-major
    TMA-aligned), row i taking input row ``i // gran_mn``."""
    _run(0, sf, out, out.size(-2), out.size(-1), 0, gran_mn, 4, num_threads)


def pack_sf_ue8m0(sf: torch.Tensor, out: torch.Tensor, gran_mn: int = 1, num_threads: int | None = None) -> None:
    """FP32 ``sf [B?, ceil(MN/gran_mn), SK]`` -> exponent bytes packed little-endian into ``out``:
    int32 ``[B?, MN, ceil(SK/4)]`` (NVIDIA) or int16 ``[B?, MN, ceil(SK/2)]`` (Ascend), any strides;
    row i takes input row ``i // gran_mn``; bytes past SK are 0. Mantissa bits are dropped."""
    per_word = out.element_size()
    _run(1, sf.view(torch.int32), out, out.size(-2), sf.size(-1), out.size(-1), gran_mn, per_word, num_threads)


def unpack_sf_ue8m0(packed: torch.Tensor, out: torch.Tensor, num_threads: int | None = None) -> None:
    """int32/int16 packed UE8M0 ``[B?, MN, P]`` -> FP32 ``out [B?, MN, SK]`` (``SK <= P * bytes``)."""
    _run(2, packed, out, out.size(-2), out.size(-1), packed.size(-1), 1, packed.element_size(), num_threads)
