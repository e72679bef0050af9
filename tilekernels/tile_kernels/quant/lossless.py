"""Re-quantising FP4 data (power-of-two scales) into E4M3 with larger blocks without changing any value."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, empty, host_kernel, threads
from ..ascend import lossless as ascend_lossless
from ..reference.cast import _block_view, format_sf, transform_sf
from ..utils import ceil_div, is_power_of_two
from .common import check_block, check_sf_for, sf_strides


def per_block_cast_lossless(x, fmt: str, x_block_size: tuple[int, int], out_block_size: tuple[int, int],
                            use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                            use_packed_ue8m0: bool = False):
    """Each output block's exponent is ``max(input block exponents) - 6`` (at least 0); every
    FP4 value times ``2^(E_in - E_out)`` is exact in E4M3, so ``cast_back`` is unchanged."""
    C.choice("fmt", fmt, ("e4m3",))
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.fail("x", "an FP4 (data, sf) pair", f"a {type(x).__name__} of length {len(x)}"
                     if isinstance(x, (tuple, list)) else type(x).__name__, TypeError)
    q, sf = x
    C.tensor("x[0]", q, dtypes=(torch.int8,), ndim=2, contiguous=True)
    ib, ob = check_block("x_block_size", x_block_size), check_block("out_block_size", out_block_size)
    rows, hidden = q.shape[0], q.shape[1] * 2
    check_sf_for("x[1]", sf, rows, hidden, ib)
    C.same_device(**{"x[0]": q, "x[1]": sf})
    if hidden % 32:
        raise C.fail("x[0]", "a hidden size (2 * dim 1, packed FP4) that is a multiple of 32",
                     f"{hidden} (shape {tuple(q.shape)})")
    if not is_power_of_two(ib[1]) or ob[0] % ib[0] or ob[1] % ib[1]:
        raise C.fail("out_block_size", f"a multiple of x_block_size {ib} (whose column count must be a power of two)",
                     ob)
    if use_packed_ue8m0 and not use_tma_aligned_col_major_sf:
        raise C.fail("use_packed_ue8m0", "False unless use_tma_aligned_col_major_sf=True",
                     f"{use_packed_ue8m0!r} with use_tma_aligned_col_major_sf={use_tma_aligned_col_major_sf!r}")
    return TABLE.run("per_block_cast_lossless", q.device, q, sf, ib, ob, use_tma_aligned_col_major_sf, use_packed_ue8m0)


def _lossless_ref(q, sf, ib, ob, use_tma_aligned_col_major_sf, use_packed_ue8m0):
    rows, hidden = q.shape[0], q.shape[1] * 2
    # Per element: the exponent of its input block's scale.
    e_in = (transform_sf(sf).contiguous().view(torch.int32) >> 23) & 0xFF
    e_in = e_in.repeat_interleave(ib[0], 0).repeat_interleave(ib[1], 1)[:rows, :hidden]
    e_out = (_block_view(e_in, *ob).amax(-1) - 6).clamp(min=0)  # (Mb, Kb)
    e_out_el = e_out.repeat_interleave(ob[0], 0).repeat_interleave(ob[1], 1)[:rows, :hidden]
    from ..reference.numerics import unpack_from_e2m1fn_x2
    factor = ((e_in - e_out_el + 127) << 23).view(torch.float32)
    data = (unpack_from_e2m1fn_x2(q) * factor).to(torch.float8_e4m3fn)
    out_sf = (e_out.to(torch.int32) << 23).view(torch.float32)
    if rows == 0:
        out_sf = torch.empty((0, ceil_div(hidden, ob[1])), dtype=torch.float32, device=q.device)
    return data, format_sf(out_sf, use_tma_aligned_col_major_sf, use_packed_ue8m0)


def _lossless_host(q, sf, ib, ob, col: bool, packed: bool):
    rows, hidden = q.shape[0], q.shape[1] * 2
    data = empty(rows, hidden, dtype=torch.float8_e4m3fn)
    e_out = torch.empty(ceil_div(rows, ob[0]), ceil_div(hidden, ob[1]), dtype=torch.int32)
    p, sm, sk = sf_strides(sf)
    args = descriptors.pack(descriptors.struct_type(LIB.source("host/cast_args.hpp"), "LosslessArgs"),
                            out=data, e_out=e_out, q=q, sf=sf, M=rows, K=hidden, IBM=ib[0], IBK=ib[1], OBM=ob[0],
                            OBK=ob[1], packed=p, sm=sm, sk=sk, kb_out=e_out.shape[1])
    host_kernel("tk_lossless", "lossless.cpp")(descriptors.address(args), threads())
    return data, format_sf((e_out << 23).view(torch.float32), col, packed)


TABLE.register("per_block_cast_lossless", reference=_lossless_ref,
               host=Impl(_lossless_host, "at least one row", lambda q, *_: q.shape[0] > 0),
               ascend=Impl(ascend_lossless.per_block_cast_lossless, "at least one row; input blocks of a multiple of "
                           "4 columns; FP32 row-major or packed column-major UE8M0 input scales; output blocks up to 128 x 256; every output sf layout "
                           "(laid out from the kernel's FP32 scales)", ascend_lossless.accepts))
