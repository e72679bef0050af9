"""asc-devkit's own forms that hand-scheduled kernels (T.import_source code) call: kernel_operator.h's
InitSocState and the block's SSBuffer, the loop / NZ2ND / repeat setters at their reset values, the
22-argument asc_copy_l0c2ub, and TileLang's lowering turning quoted C API includes into <...> ones."""
import pytest
import torch

from deepjit.backends.ascend_twin import TwinLaunchError
from deepjit.tilelang_route.lowering import bracket_api_includes

from .conftest import launch_source

# The AIC publishes one word per vector core in the block's SSBuffer; each AIV reads its word back after a
# cross-core flag and stores it. A per-core (unshared) buffer, or one left zeroed, changes the result.
SSBUF = r'''
#include <kernel_operator.h>
extern "C" __global__ __mix__(1, 2) void ssbuf_share(__gm__ uint32_t* out, __gm__ uint32_t* stale) {
  AscendC::InitSocState();
  asc_set_gm2ub_loop_size(1ul, 1ul);
  asc_set_ub2gm_loop_size(1u, 1u);
  asc_set_l0c2gm_nz2nd(1u, 0u, 0u);
  asc_set_l3d_rpt_b(1 << 16);
  volatile __ssbuf__ uint32_t* ss = (volatile __ssbuf__ uint32_t*)AscendC::GetSsbufBaseAddr();
  if ASC_IS_AIC {
    if (block_idx == 0) stale[0] = ss[100];  // never written: stale data, not zero
    ss[0] = 1000u + block_idx;
    ss[8] = 2000u + block_idx;
    asc_sync_intra_arrive(PIPE_S, 0);   // AIC id i < 16 -> AIV0 flag i, 16 + i -> AIV1 flag i
    asc_sync_intra_arrive(PIPE_S, 16);
  }
  if ASC_IS_AIV {
    asc_sync_intra_wait(PIPE_S, 0);
    out[block_idx * 2 + asc_get_sub_block_id()] = ss[asc_get_sub_block_id() * 8];
  }
}
'''

LOOP_SIZE = r'''
#include <kernel_operator.h>
extern "C" __global__ __vector__ void loop_size(__gm__ float* x) { asc_set_gm2ub_loop_size(2ul, 1ul); }
'''

# The 22-argument L0C -> UB copy with a post-processing setting the twin does not model.
L0C2UB_BROADCAST = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __cube__ void l0c2ub_broadcast(__gm__ float* x) {
  __ubuf__ float *ub = (__ubuf__ float *)0;
  __cc__ float *c = (__cc__ float *)0;
  asc_copy_l0c2ub(ub, c, 16u, 16u, 16u, 16u, 0, false, 0, 0, 0, 0, false, true, 0, 0, false, 0, false, false, true,
                  false);
}
'''


def test_ssbuf_is_shared_by_the_block_and_starts_stale(twin_runtime):
    out = torch.zeros(6, dtype=torch.int32)
    stale = torch.zeros(1, dtype=torch.int32)
    launch_source(twin_runtime, "ssbuf_share", SSBUF, out.view(torch.uint32), stale.view(torch.uint32), num_blocks=3)
    want = torch.tensor([[1000 + b, 2000 + b] for b in range(3)], dtype=torch.int32).flatten()
    assert torch.equal(out, want)
    assert stale.item() != 0


def test_loop_counts_the_twin_does_not_run_fail_naming_the_setter(twin_runtime):
    with pytest.raises(TwinLaunchError, match=r"asc_set_gm2ub_loop_size\(2, 1\)"):
        launch_source(twin_runtime, "loop_size", LOOP_SIZE, torch.zeros(1))


def test_long_form_l0c2ub_refuses_post_processing_it_does_not_model(twin_runtime):
    with pytest.raises(TwinLaunchError, match="asc_copy_l0c2ub: broadcast_en is not implemented"):
        launch_source(twin_runtime, "l0c2ub_broadcast", L0C2UB_BROADCAST, torch.zeros(1))


def test_quoted_api_includes_become_bracket_includes():
    src = '#include "c_api/asc_simd.h"\n  # include "kernel_operator.h"\n#include "my_local.h"\n'
    assert bracket_api_includes(src) == '#include <c_api/asc_simd.h>\n  # include <kernel_operator.h>\n#include "my_local.h"\n'
