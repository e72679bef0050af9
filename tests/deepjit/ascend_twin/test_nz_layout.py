"""The L1 NZ layout itself, byte for byte: a hand-written mixed kernel copies a ragged BF16 tile GM->L1
with asc_copy_gm2l1_nd2nz, reads the L1 bytes back raw to a vector core's UB (asc_copy_l12ub: on
dav-3510 there is no L1->GM copy, asc_copy_l12gm.md says 950 does not support it) and from there to GM.

The expected bytes are computed here from the ND tensor and the documented NZ format (C0 = 32 bytes of
one row per 32-byte block, 16 x C0 fractals, columns past D zero-filled up to C0; MTE2_NZ_PARA gives
the 32-byte strides between N rows, C0 columns and matrices, asc_set_gm2l1_nz_para.md). Every element
has a distinct bit pattern, so any swap of rows, columns or blocks changes the result."""
import pytest
import torch

from .conftest import launch_source

ROWS, COLS = 20, 40  # 20 rows: not a multiple of 16; 40 BF16 columns: 2.5 C0 blocks
C0 = 16  # BF16 elements in 32 bytes
ROWS_PAD = 32  # each C0 column block holds ROWS_PAD rows (dst_c0_stride = 32 x 32 bytes)
BLOCKS = (COLS + C0 - 1) // C0
L1_OFFSET = 1024  # the tile does not start at L1 address 0
NZ_BYTES = BLOCKS * ROWS_PAD * 32

ND2NZ_READBACK = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void nd2nz_readback(__gm__ bfloat16_t* a, __gm__ uint8_t* out) {
  __cbuf__ uint8_t *l1 = (__cbuf__ uint8_t *)0;
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  if ASC_IS_AIC {
    asc_set_gm2l1_nz_para(1, 1, ROWS_PAD, 0);  // nd_num 1, N stride 1 block, C0-column stride ROWS_PAD blocks
    asc_copy_gm2l1_nd2nz((__cbuf__ bfloat16_t *)(l1 + L1_OFFSET), a, COLS * 2, CACHE_CTL, ROWS, COLS, 0, false);
    asc_sync_notify(PIPE_MTE2, PIPE_MTE1, static_cast<event_t>(0));
    asc_sync_wait(PIPE_MTE2, PIPE_MTE1, static_cast<event_t>(0));
    asc_copy_l12ub(ub, l1 + L1_OFFSET, false, 1, NZ_BYTES / 32, 0, 0);  // raw bytes to AIV0's UB
    asc_sync_intra_arrive(PIPE_MTE1, 0);
  }
  if ASC_IS_AIV {
    if (asc_get_sub_block_id() == 0) {
      asc_sync_intra_wait(PIPE_MTE3, 0);
      asc_copy_ub2gm_align(out, ub, 1, NZ_BYTES, static_cast<asc_store_l2_cache_mode>(0), NZ_BYTES, NZ_BYTES);
    }
  }
}
'''


# TileLang's call passes the L2 cache mode as the enum; asc-devkit's dav-3510 prototype takes a uint8_t
# l2_cache_ctl (npu_arch_3510/cube_datamove_impl.h), as hand-written and T.import_source kernels pass it.
CACHE_CTL_FORMS = {"enum": "static_cast<asc_load_l2_cache_mode>(0)", "uint8": "0u"}


def _source(cache_ctl="enum"):
    defines = dict(ROWS=ROWS, COLS=COLS, ROWS_PAD=ROWS_PAD, L1_OFFSET=L1_OFFSET, NZ_BYTES=NZ_BYTES,
                   CACHE_CTL=CACHE_CTL_FORMS[cache_ctl])
    return "".join(f"#define {k} {v}\n" for k, v in defines.items()) + ND2NZ_READBACK


def nz_bytes_of(nd: torch.Tensor) -> torch.Tensor:
    """The documented NZ image of a [rows, cols] 16-bit ND tile as int16 [blocks, ROWS_PAD, C0]: block b,
    row r, lane e holds nd[r, b * C0 + e]; lanes past the last column are zero. Rows >= rows are not
    written by the copy (returned as zero here, compared only where defined)."""
    rows, cols = nd.shape
    padded = torch.zeros(rows, BLOCKS * C0, dtype=torch.int16)
    padded[:, :cols] = nd.view(torch.int16)
    nz = torch.zeros(BLOCKS, ROWS_PAD, C0, dtype=torch.int16)
    nz[:, :rows, :] = padded.view(rows, BLOCKS, C0).permute(1, 0, 2)
    return nz


@pytest.mark.parametrize("cache_ctl", sorted(CACHE_CTL_FORMS))
def test_nd2nz_layout_read_back_raw(twin_runtime, cache_ctl):
    bits = torch.arange(ROWS * COLS, dtype=torch.int32).add(0x3F80).to(torch.int16)  # distinct, finite BF16
    a = bits.view(torch.bfloat16).reshape(ROWS, COLS)
    out = torch.full((NZ_BYTES,), 0xA5, dtype=torch.uint8)
    launch_source(twin_runtime, "nd2nz_readback", _source(cache_ctl), a, out)
    got = out.view(torch.int16).reshape(BLOCKS, ROWS_PAD, C0)
    want = nz_bytes_of(a)
    assert torch.equal(got[:, :ROWS], want[:, :ROWS]), (got[:, :ROWS] != want[:, :ROWS]).nonzero()[:5]
    assert (got[BLOCKS - 1, :ROWS, COLS % C0:] == 0).all(), "columns past D must be zero-filled to C0"


def test_nz_reference_is_not_the_nd_layout():
    """The expectation itself distinguishes NZ from ND (a kernel copying ND bytes would fail)."""
    bits = torch.arange(ROWS * COLS, dtype=torch.int32).add(0x3F80).to(torch.int16)
    nz = nz_bytes_of(bits.view(torch.bfloat16).reshape(ROWS, COLS))
    assert not torch.equal(nz.flatten()[:ROWS * COLS], bits)
    assert nz[1, 0, 0] == bits[C0] and nz[0, 1, 0] == bits[COLS]  # block 1 starts at column 16; row 1 after row 0
