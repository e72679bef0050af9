"""Per-token, per-block and per-channel casts, their scale-only / precomputed-scale variants and
the cast-backs. All share one driver: validate, then the host kernel (CPU) or the reference."""
from __future__ import annotations

from typing import Union

import torch

from deepjit import Impl
from deepjit import validation as C

from .._dispatch import TABLE
from ..ascend import block_cast as ascend_cast
from ..ascend import cast_back as ascend_cast_back
from ..ascend import channel_cast as ascend_channel_cast
from ..ascend import channel_cast_fused as ascend_channel_cast_fused
from ..host import cast as host
from ..reference import cast as ref
from ..reference import cast_e5m6 as ref_e5m6
from ..reference.transpose import transpose as transpose_ref
from ..transpose import transpose_host
from .common import (
    check_block,
    check_fmt,
    check_quant_input,
    logical_hidden,
)
from .types import QuantTensor


def _check_precomputed_sf(sf, rows: int, hidden: int, block: tuple[int, int], col: bool, packed: bool):
    if col or packed:
        flag, value = ("use_tma_aligned_col_major_sf", col) if col else ("use_packed_ue8m0", packed)
        raise C.fail(flag, "False with a precomputed sf (it must be row-major FP32: use_tma_aligned_col_major_sf "
                     "and use_packed_ue8m0 both False)", repr(value))
    want = (-(-rows // block[0]), -(-hidden // block[1]))
    C.tensor("sf", sf, dtypes=(torch.float32,), shape=want, contiguous=True)


def _cast(op: str, x, fmt: str, block: tuple[int, int], x_block_size, col: bool, round_sf: bool, packed: bool,
          sf: torch.Tensor | None = None, sf_only: bool = False, clamp_min: float | None = None):
    """Validated arguments in; ``(q, sf)``, ``sf`` alone (sf_only) or ``q`` alone (sf given) out,
    from the implementation the table gives public op ``op``."""
    kind, data, in_sf, in_block = check_quant_input("x", x, x_block_size)
    rows, hidden = data.shape[0], logical_hidden(data)
    if packed and not col:
        raise C.fail("use_packed_ue8m0", "False unless use_tma_aligned_col_major_sf=True",
                     f"{packed!r} with use_tma_aligned_col_major_sf={col!r}")
    if fmt == "e2m1" and hidden % 2:
        raise C.fail("x" if kind == "float" else "x[0]", "an even hidden size with fmt 'e2m1' (it packs two values "
                     "per byte)", f"hidden {hidden}")
    if sf is not None:
        _check_precomputed_sf(sf, rows, hidden, block, col, packed)
        C.same_device(x=data, sf=sf)
    return TABLE.run(op, data.device, kind, x, fmt, block, in_block, col, round_sf, packed, sf, sf_only, clamp_min)


def _cast_ref(kind, x, fmt, block, in_block, col, round_sf, packed, sf, sf_only, clamp_min):
    res = ref.cast(tuple(x) if kind == "quant" else x, fmt, block, sf=sf, x_block_size=in_block, round_sf=round_sf,
                   use_tma_aligned_col_major_sf=col, use_packed_ue8m0=packed, clamp_min=clamp_min)
    return res[1] if sf_only else res


def _ascend_cast(kind, x, fmt, block, in_block, col, round_sf, packed, sf, sf_only, clamp_min):
    if kind == "quant":  # re-quantisation: the Ascend cast-back to FP32, then the cast
        x = ascend_cast_back.cast_back(tuple(x), "fp32", in_block)
    res = ascend_cast.cast(x, fmt, block, col, round_sf, packed, sf, clamp_min)
    return res[1] if sf_only else res


_ASCEND_CAST = Impl(_ascend_cast, "E4M3/E2M1 from BF16/FP32 or a (data, sf) input; FP32 row/col-major or int16 "
                                  "packed UE8M0 scales; scale-only, precomputed-scale and clamp_min forms",
                   lambda kind, x, fmt, block, in_block, *_: kind != "quant" or
                   ascend_cast_back.accepts(tuple(x), "fp32", in_block))
_CAST = "BF16/FP32 input or a (data, sf) input cast back first; every block shape, format and sf layout"
for _op in ("per_token_cast", "per_token_cast_with_sf_only", "per_token_cast_with_precomputed_sf", "per_block_cast",
            "per_block_cast_with_sf_only", "per_block_cast_with_precomputed_sf", "per_channel_cast"):
    TABLE.register(_op, reference=_cast_ref, host=Impl(host.cast, _CAST), ascend=_ASCEND_CAST)


# per_channel_cast_and_transpose: the same canonical arguments, the data returned transposed (H, T)
def _cast_transposed_ref(*args):
    q, sf = _cast_ref(*args)
    return transpose_ref(q), sf


def _cast_transposed_host(*args):
    q, sf = host.cast(*args)
    return transpose_host(q), sf


def _cast_transposed_ascend(kind, x, fmt, block, in_block, col, round_sf, packed, sf, sf_only, clamp_min):
    return ascend_channel_cast.cast(x, block[0], round_sf, transposed=True)


TABLE.register("per_channel_cast_and_transpose", reference=_cast_transposed_ref,
               host=Impl(_cast_transposed_host, "the host per-channel cast, then the host transpose"),
               ascend=Impl(_cast_transposed_ascend, "one kernel: the per-channel E4M3 cast writing its data "
                                                    "transposed (BF16 x, every num_per_tokens the op takes)"))


def _check_per_token(x, fmt, num_per_channels, x_block_size):
    fmt = check_fmt(fmt, ("e4m3", "e2m1", "e5m6"))
    C.integer("num_per_channels", num_per_channels, 1)
    data = x[0] if isinstance(x, (tuple, list)) else x
    C.tensor("x" if data is x else "x[0]", data, ndim=2)
    hidden = logical_hidden(data) if isinstance(x, (tuple, list)) else data.shape[1]
    whole_row = num_per_channels == hidden and hidden % 64 == 0
    if num_per_channels not in (16, 32, 64, 128) and not whole_row:
        raise C.fail("num_per_channels", f"16, 32, 64, 128 or the hidden size ({hidden}, a multiple of 64)",
                     num_per_channels)
    if whole_row and num_per_channels not in (16, 32, 64, 128) and isinstance(x, (tuple, list)):
        raise C.fail("num_per_channels", "16, 32, 64 or 128 for a (data, sf) input x (a whole-row scale, "
                     "num_per_channels == hidden, is not supported for one)", num_per_channels)
    return fmt


def per_token_cast(x: Union[torch.Tensor, QuantTensor], fmt: str, num_per_channels: int,
                   x_block_size: tuple[int, int] | None = None, use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False) -> QuantTensor:
    """Cast to E4M3 / E2M1 / E5M6 with one scale per ``num_per_channels`` channels of a row."""
    fmt = _check_per_token(x, fmt, num_per_channels, x_block_size)
    if fmt == "e5m6":
        return _cast_e5m6(x, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    return _cast("per_token_cast", x, fmt, (1, num_per_channels), x_block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


def per_token_cast_with_sf_only(x, fmt: str, num_per_channels: int, x_block_size=None,
                                use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                use_packed_ue8m0: bool = False) -> torch.Tensor:
    fmt = _check_per_token(x, fmt, num_per_channels, x_block_size)
    if fmt == "e5m6":
        raise C.fail("fmt", "'e4m3' or 'e2m1' (fmt 'e5m6' has no scale-only variant)", repr(fmt))
    return _cast("per_token_cast_with_sf_only", x, fmt, (1, num_per_channels), x_block_size, use_tma_aligned_col_major_sf, round_sf,
                 use_packed_ue8m0, sf_only=True)


def per_token_cast_with_precomputed_sf(x, fmt: str, num_per_channels: int, sf: torch.Tensor, x_block_size=None,
                                       use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    fmt = _check_per_token(x, fmt, num_per_channels, x_block_size)
    if fmt == "e5m6":
        raise C.fail("fmt", "'e4m3' or 'e2m1' (fmt 'e5m6' has no precomputed-sf variant)", repr(fmt))
    return _cast("per_token_cast_with_precomputed_sf", x, fmt, (1, num_per_channels), x_block_size, use_tma_aligned_col_major_sf, round_sf,
                 use_packed_ue8m0, sf=sf)


def _cast_e5m6(x, num_per_channels, x_block_size, col, round_sf, packed):
    if x_block_size is not None or isinstance(x, (tuple, list)):
        raise C.fail("x", "a plain BF16/FP32 tensor and x_block_size=None with fmt 'e5m6'",
                     "a (data, sf) pair" if isinstance(x, (tuple, list)) else f"x_block_size={x_block_size!r}")
    C.tensor("x", x, dtypes=(torch.bfloat16, torch.float32), ndim=2, last_stride_one=True)
    hidden = x.shape[1]
    if num_per_channels != hidden or hidden % 8:
        raise C.fail("num_per_channels", "the hidden size with fmt 'e5m6' (a whole-row scale), and hidden % 8 == 0",
                     f"{num_per_channels} (hidden {hidden})")
    return TABLE.run("cast_to_e5m6", x.device, x, num_per_channels, col, round_sf, packed)


TABLE.register("cast_to_e5m6", reference=ref_e5m6.cast_to_e5m6, host=host.cast_to_e5m6)


def _check_per_block(x, fmt, block_size):
    fmt = check_fmt(fmt)
    C.tensor("x", x, dtypes=(torch.bfloat16, torch.float32), ndim=2, contiguous=True)
    bm, bk = check_block("block_size", block_size)
    if bm not in (32, 128) or bk not in (32, 128):
        raise C.fail("block_size", "entries 32 or 128", tuple(block_size))
    if x.shape[1] % 64:
        raise C.fail("x", "a hidden size (dim 1) that is a multiple of 64", f"shape {tuple(x.shape)}")
    return fmt, (bm, bk)


def per_block_cast(x: torch.Tensor, fmt: str, block_size: tuple[int, int], use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False) -> QuantTensor:
    fmt, block = _check_per_block(x, fmt, block_size)
    return _cast("per_block_cast", x, fmt, block, None, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


def per_block_cast_with_sf_only(x: torch.Tensor, fmt: str, block_size: tuple[int, int],
                                use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                use_packed_ue8m0: bool = False) -> torch.Tensor:
    fmt, block = _check_per_block(x, fmt, block_size)
    return _cast("per_block_cast_with_sf_only", x, fmt, block, None, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, sf_only=True)


def per_block_cast_with_precomputed_sf(x: torch.Tensor, fmt: str, block_size: tuple[int, int], sf: torch.Tensor,
                                       use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    fmt, block = _check_per_block(x, fmt, block_size)
    return _cast("per_block_cast_with_precomputed_sf", x, fmt, block, None, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, sf=sf)


def _check_per_channel(x, fmt, num_per_tokens, allowed_npt, dtypes=(torch.bfloat16, torch.float32)):
    C.choice("fmt", fmt, ("e4m3",))
    C.tensor("x", x, dtypes=dtypes, ndim=2, contiguous=True)
    C.choice("num_per_tokens", num_per_tokens, allowed_npt)
    if x.shape[0] % 128 or x.shape[1] % 64:
        raise C.fail("x", "a token count (dim 0) divisible by 128 and a hidden size (dim 1) divisible by 64",
                     f"shape {tuple(x.shape)}")


def per_channel_cast(x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool = False) -> QuantTensor:
    """E4M3 with one scale per channel per ``num_per_tokens`` (= 128) tokens: sf (T/128, H)."""
    _check_per_channel(x, fmt, num_per_tokens, (128,))
    return _cast("per_channel_cast", x, "e4m3", (num_per_tokens, 1), None, False, round_sf, False)


def per_channel_cast_and_transpose(x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool = False) -> QuantTensor:
    """Per-channel cast with the data returned transposed, (H, T); sf stays (T/npt, H)."""
    _check_per_channel(x, fmt, num_per_tokens, (32, 128), dtypes=(torch.bfloat16,))
    return _cast("per_channel_cast_and_transpose", x, "e4m3", (num_per_tokens, 1), None, False, round_sf, False)


def per_channel_cast_fused(x: Union[torch.Tensor, QuantTensor], fmt: str, num_per_tokens: int, round_sf: bool = False,
                           num_per_channels: int | None = None,
                           pos_to_token: torch.Tensor | None = None) -> QuantTensor:
    """Per-channel (128, 1) E4M3 cast fused with an optional re-scale of an E4M3 (data, sf) input
    (sf FP32 (T, H/num_per_channels)) and an optional row gather (row p = x[pos_to_token[p]], -1 -> 0)."""
    C.choice("fmt", fmt, ("e4m3",))
    C.choice("num_per_tokens", num_per_tokens, (128,))
    is_quant = isinstance(x, (tuple, list))
    if is_quant:
        C.choice("num_per_channels", num_per_channels, (128,))
        data, sf_in = x
        C.tensor("x[0]", data, dtypes=(torch.float8_e4m3fn,), ndim=2, contiguous=True)
        C.tensor("x[1]", sf_in, dtypes=(torch.float32,), shape=(data.shape[0], -(-data.shape[1] // 128)),
                 contiguous=True)
    else:
        if num_per_channels is not None:
            raise C.fail("num_per_channels", "None for a plain tensor x", num_per_channels)
        data = C.tensor("x", x, dtypes=(torch.bfloat16, torch.float32), ndim=2, contiguous=True)
    if data.shape[1] % 64:
        raise C.fail("x[0]" if is_quant else "x", "a hidden size (dim 1) that is a multiple of 64",
                     f"shape {tuple(data.shape)}")
    if pos_to_token is not None:
        C.tensor("pos_to_token", pos_to_token, dtypes=(torch.int32,), ndim=1, contiguous=True)
        if pos_to_token.shape[0] % 16:
            raise C.fail("pos_to_token", "a length that is a multiple of 16", f"shape {tuple(pos_to_token.shape)}")
        if pos_to_token.device.type == "cpu" and pos_to_token.numel():  # no host read of a device tensor: the
            # Ascend row gather writes zero rows for entries outside [0, num_tokens)
            if int(pos_to_token.max()) >= data.shape[0]:
                raise C.fail("pos_to_token", f"entries < num_tokens ({data.shape[0]})", f"max {int(pos_to_token.max())}")
            if int(pos_to_token.min()) < -1:
                raise C.fail("pos_to_token", "entries >= -1", f"min {int(pos_to_token.min())}")
    elif data.shape[0] % 128:
        raise C.fail("x[0]" if is_quant else "x", "a token count (dim 0) that is a multiple of 128 without "
                     "pos_to_token", f"shape {tuple(data.shape)}")
    return TABLE.run("per_channel_cast_fused", data.device, x, num_per_tokens, num_per_channels, round_sf, pos_to_token)


def _cast_fused_ref(x, num_per_tokens, num_per_channels, round_sf, pos_to_token):
    return ref.per_channel_cast_fused(tuple(x) if isinstance(x, (tuple, list)) else x, num_per_tokens,
                                      num_per_channels, round_sf, pos_to_token)


TABLE.register("per_channel_cast_fused", reference=_cast_fused_ref, host=host.per_channel_cast_fused,
               ascend=Impl(ascend_channel_cast_fused.per_channel_cast_fused, "every form: the row gather, the "
                           "cast-back of an E4M3 (data, sf) input and the per-channel cast, each an Ascend kernel"))


def cast_back(x: QuantTensor, fmt: str, x_block_size: tuple[int, int], x_special_fmt: str | None = None) -> torch.Tensor:
    """Dequantise ``(data, sf)`` to ``fmt`` 'bf16' or 'fp32'; ``x_special_fmt='e5m6'`` for E5M6 data."""
    C.choice("fmt", fmt, ("bf16", "fp32"))
    C.choice("x_special_fmt", x_special_fmt, (None, "e5m6"))
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.fail("x", "a (data, sf) pair", f"a {type(x).__name__} of length {len(x)}"
                     if isinstance(x, (tuple, list)) else type(x).__name__, TypeError)
    block = check_block("x_block_size", x_block_size)
    if x_special_fmt == "e5m6":
        data, sf = x
        C.tensor("x[0]", data, dtypes=(torch.uint8,), ndim=2, contiguous=True)
        if data.shape[1] % 3:
            raise C.fail("x[0]", "E5M6 data of a width that is a multiple of 3 (3 bytes per 2 values)",
                         f"width {data.shape[1]}")
        C.tensor("x[1]", sf, dtypes=(torch.float32, torch.int32), ndim=2)
        rows, hidden = data.shape[0], data.shape[1] * 2 // 3
        if hidden % 8:  # the E5M6 cast's rule: its codes pack 8 values into 3 words
            raise C.fail("x[0]", "E5M6 data of a hidden size that is a multiple of 8 (width a multiple of 12)",
                         f"width {data.shape[1]} (hidden {hidden})")
        blocks = (-(-rows // block[0]), -(-hidden // block[1]))
        if sf.shape[0] != blocks[0] or sf.shape[1] < (blocks[1] if sf.dtype == torch.float32 else -(-blocks[1] // 4)):
            raise C.fail("x[1]", f"a shape covering {blocks} scale blocks", tuple(sf.shape))
        return TABLE.run("cast_back_from_e5m6", data.device, tuple(x), fmt, block)
    # int16 packed scales too: what the casts produce on Ascend
    kind, data, sf, _ = check_quant_input("x", tuple(x), block, packed=(torch.int32, torch.int16))
    if logical_hidden(data) % 64:
        raise C.fail("x[0]", "a hidden size that is a multiple of 64", f"{logical_hidden(data)} (shape "
                     f"{tuple(data.shape)})")
    return TABLE.run("cast_back", data.device, (data, sf), fmt, block)


TABLE.register("cast_back_from_e5m6", reference=ref_e5m6.cast_back_from_e5m6,
               host=host.cast_back_from_e5m6)
TABLE.register("cast_back", reference=ref.cast_back,
               host=Impl(host.cast_back, "FP32 or int32 packed scales", lambda x, *_: x[1].dtype != torch.int16),
               ascend=Impl(ascend_cast_back.cast_back, "E4M3/E2M1; FP32 row/col-major, int16 or int32 packed scales "
                           "(tiles within UB)", ascend_cast_back.accepts))


def per_token_cast_back(x: QuantTensor, fmt: str, num_per_channels: int, x_special_fmt: str | None = None) -> torch.Tensor:
    C.integer("num_per_channels", num_per_channels, 1)
    return cast_back(x, fmt, (1, num_per_channels), x_special_fmt)


# E5M6 Ascend column (ascend/e5m6.py)
from ..ascend import e5m6 as ascend_e5m6  # noqa: E402

TABLE.add_ascend("cast_to_e5m6", Impl(ascend_e5m6.cast_to_e5m6, "BF16/FP32 x, every sf layout flag"))
TABLE.add_ascend("cast_back_from_e5m6", Impl(ascend_e5m6.cast_back_from_e5m6, "one scale column (x_block_size[1] >= "
                                             "hidden, every row block); FP32 or packed UE8M0 scales",
                                             ascend_e5m6.one_scale_column))
