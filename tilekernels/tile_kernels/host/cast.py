"""Host kernels of the quantisation casts: thin wrappers that allocate the outputs and launch
``block_cast.cpp``, ``cast_back.cpp`` and ``e5m6.cpp`` (beside this file) on validated arguments.
Each entry takes the arguments of its op's reference in ``tile_kernels.quant.cast_ops``."""
from __future__ import annotations

import torch

from deepjit import descriptors

from .._lib import LIB, empty, host_kernel, threads
from ..quant.common import FMT_CODES, alloc_sf, logical_hidden, sf_strides


def _args(name: str, **fields):
    """The named launch arguments ``name`` of host/cast_args.hpp."""
    return descriptors.pack(descriptors.struct_type(LIB.source("host/cast_args.hpp"), name), **fields)


def host_cast(x: torch.Tensor, fmt: str, block: tuple[int, int], round_sf: bool, sf_out: torch.Tensor | None,
              clamp_min: float | None = None, mode: int = 0, q_out: torch.Tensor | None = None):
    """Run tk_block_cast on a BF16/FP32 (M, K) tensor with unit column stride. ``sf_out`` receives
    the scales (mode 0/1) or holds the caller's FP32 scales (mode 2)."""
    from ..reference.cast import FMT_CLAMP_MIN
    m, k = x.shape
    if q_out is None and mode != 1:
        q_out = empty(m, k // 2 if fmt == "e2m1" else k, dtype=torch.int8 if fmt == "e2m1" else torch.float8_e4m3fn)
    if m > 0 and k > 0:
        packed, sm, sk = sf_strides(sf_out)
        args = _args("BlockCastArgs", q=q_out, sf=sf_out, x=x, in_dtype=int(x.dtype == torch.bfloat16), M=m, K=k,
                     ldx=x.stride(0), fmt=FMT_CODES[fmt], BM=block[0], BK=block[1], round_sf=int(round_sf),
                     clamp_min=FMT_CLAMP_MIN[fmt] if clamp_min is None else float(clamp_min), packed=packed, sm=sm,
                     sk=sk, mode=mode)
        host_kernel("tk_block_cast", "block_cast.cpp")(descriptors.address(args), threads())
    return q_out


def host_cast_back(q: torch.Tensor, sf: torch.Tensor, block: tuple[int, int], out_dtype: torch.dtype) -> torch.Tensor:
    m, k = q.shape[0], logical_hidden(q)
    out = empty(m, k, dtype=out_dtype)
    if m > 0 and k > 0:
        packed, sm, sk = sf_strides(sf)
        args = _args("CastBackArgs", out=out, q=q, sf=sf, fmt=FMT_CODES["e2m1" if q.dtype == torch.int8 else "e4m3"],
                     bf16_out=int(out_dtype == torch.bfloat16), M=m, K=k, BM=block[0], BK=block[1], packed=packed,
                     sm=sm, sk=sk)
        host_kernel("tk_cast_back", "cast_back.cpp")(descriptors.address(args), threads())
    return out


def cast(kind, x, fmt, block, in_block, col, round_sf, packed, sf, sf_only, clamp_min):
    data, in_sf = (x, None) if kind == "float" else x
    rows, hidden = data.shape[0], logical_hidden(data)
    xf = data if kind == "float" else host_cast_back(data.contiguous(), in_sf, in_block, torch.float32)
    if sf is not None:
        return host_cast(xf, fmt, block, round_sf, sf, clamp_min, mode=2)
    out_sf = alloc_sf(-(-rows // block[0]), -(-hidden // block[1]), col, packed, data.device)
    q = host_cast(xf, fmt, block, round_sf, out_sf, clamp_min, mode=1 if sf_only else 0)
    return out_sf if sf_only else (q, out_sf)


def cast_to_e5m6(x, num_per_channels, col, round_sf, packed):
    rows, hidden = x.shape
    if packed and not col:  # row-major packed exponents: (T, 1) int32, padding bytes zero
        sf = torch.zeros((rows, 1), dtype=torch.int32)
    else:
        sf = alloc_sf(rows, 1, col, packed, x.device)
    q = empty(rows, hidden * 3 // 2, dtype=torch.uint8)
    if rows:
        p, sm, sk = sf_strides(sf)
        args = _args("E5M6Args", op=0, out=q, sf=sf, x=x.contiguous(), dt=int(x.dtype == torch.bfloat16), T=rows,
                     H=hidden, BM=1, BK=hidden, round_sf=int(round_sf), packed=p, sm=sm, sk=sk)
        host_kernel("tk_e5m6", "e5m6.cpp")(descriptors.address(args), threads())
    return q, sf


def per_channel_cast_fused(x, num_per_tokens, num_per_channels, round_sf, pos_to_token):
    is_quant = isinstance(x, (tuple, list))
    data, sf_in = x if is_quant else (x, None)
    if pos_to_token is not None:
        # Gather first (padding rows: zero data, zero scale), exactly as the reference does.
        idx = pos_to_token.long()
        valid = (idx >= 0).unsqueeze(1)
        raw = data.view(torch.uint8) if is_quant else data  # FP8 tensors lack masked_fill
        data = raw[idx.clamp(min=0)].masked_fill_(~valid, 0).view(data.dtype)
        if is_quant:
            sf_in = sf_in[idx.clamp(min=0)].masked_fill_(~valid, 0)
    xf = host_cast_back(data, sf_in, (1, 128), torch.float32) if is_quant else data
    return cast("float", xf, "e4m3", (num_per_tokens, 1), None, False, round_sf, False, None, False, None)


def cast_back_from_e5m6(x, fmt, block):
    data, sf = x
    rows, hidden = data.shape[0], data.shape[1] * 2 // 3
    out = empty(rows, hidden, dtype=torch.float32 if fmt == "fp32" else torch.bfloat16)
    if rows:
        p, sm, sk = sf_strides(sf)
        args = _args("E5M6Args", op=1, out=out, sf=sf, x=data, dt=int(fmt == "bf16"), T=rows, H=hidden,
                     BM=block[0], BK=block[1], round_sf=0, packed=p, sm=sm, sk=sk)
        host_kernel("tk_e5m6", "e5m6.cpp")(descriptors.address(args), threads())
    return out


def cast_back(x, fmt, block):
    data, sf = x
    return host_cast_back(data.contiguous(), sf, block, torch.float32 if fmt == "fp32" else torch.bfloat16)
