"""Twin semantics that TileLang kernels rely on, checked with small hand-written AscendC kernels:
store-mode atomics on MTE3 stores (contended by every block at once, reset by asc_set_atomic_none),
warp collectives that involve only the active lanes of their warp, all-core sync deadlocks named by
block, and run_on_twin's view-named / scalar parameters."""
import pytest
import torch

from deepjit.backends.ascend_twin import TwinLaunchError
from deepjit.errors import DeepJITError

from .conftest import launch_source

ROW_STORE = r'''
#include <c_api/asc_simd.h>
// Every block stores its 64-element row of x to y: under an atomic mode all blocks combine into y.
extern "C" __global__ __vector__ void atomic_rows(__gm__ int32_t* x, __gm__ int32_t* y, int32_t mode) {
  __ubuf__ int32_t *ub = (__ubuf__ int32_t *)0;
  asc_copy_gm2ub_align(ub, x + block_idx * 64, 1, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  if (mode == 1) asc_set_atomic_add_int();
  if (mode == 2) asc_set_atomic_max_int32();  // TileLang's spelling of asc_set_atomic_max_int
  if (mode == 3) { asc_set_atomic_min_int(); asc_set_atomic_none(); }
  asc_copy_ub2gm_align(y, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
  asc_set_atomic_none();
}
'''

BLOCKS = 48  # all run at once on the twin's 64 vector cores: every element is contended


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_store_mode_atomics_combine_every_block(twin_runtime, mode):
    x = torch.randint(-1000, 1000, (BLOCKS, 64), dtype=torch.int32, generator=torch.Generator().manual_seed(mode))
    y = torch.randint(-50, 50, (64,), dtype=torch.int32)
    base = y.clone()
    launch_source(twin_runtime, "atomic_rows", ROW_STORE, x, y, mode, num_blocks=BLOCKS)
    if mode == 1:
        assert torch.equal(y, base + x.sum(0, dtype=torch.int32))
    elif mode == 2:
        assert torch.equal(y, torch.maximum(base, x.max(0).values))
    else:  # asc_set_atomic_none turned the mode off again: a plain store, one block's row
        assert any(torch.equal(y, row) for row in x)


CROSS_WARP = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
// TileLang's cross-warp all-reduce shape: every warp reduces, then only warp 0 (tx < 32) reduces the
// per-warp sums between two block barriers while the other 96 lanes wait at the second one. Lanes 0..3
// of warp 0 also shuffle from lane 40 - 32 = 8 of a half-active warp 1 (inactive source: no value).
__simt_vf__ __launch_bounds__(128) inline void cross_warp(__gm__ float* x, __gm__ float* y, __gm__ float* probe,
                                                          __ubuf__ float* part) {
  uint32_t tx = threadIdx.x;
  float v = x[block_idx * 128 + tx];
  float w = asc_reduce_add(v);
  if (tx % 32 == 0) part[tx / 32] = w;
  asc_syncthreads();
  if (tx < 32) {
    float s = asc_reduce_add(tx < 4 ? part[tx] : 0.0f);
    if (tx == 0) part[4] = s;
  }
  if (tx >= 32 && tx < 48) {
    float m = asc_reduce_max(v);  // 16 active lanes of warp 1
    if (tx == 32) part[5] = m;
  }
  if (tx >= 32 && tx < 40) probe[block_idx * 8 + tx - 32] = asc_shfl(v, 8);
  asc_syncthreads();
  y[block_idx * 130 + tx] = part[4];
  if (tx == 0) y[block_idx * 130 + 128] = part[5];
}
extern "C" __global__ __vector__ void cross_warp_sum(__gm__ float* x, __gm__ float* y, __gm__ float* probe) {
  __ubuf__ float *ub = (__ubuf__ float *)0;
  asc_vf_call<cross_warp>(cce::dim3(128), x, y, probe, ub);
}
'''


def test_warp_collectives_involve_only_the_active_lanes_of_their_warp(twin_runtime):
    blocks = 4
    x = torch.randint(-8, 8, (blocks, 128), generator=torch.Generator().manual_seed(0)).float()
    y = torch.zeros(blocks, 130)
    probe = torch.zeros(blocks, 8)
    launch_source(twin_runtime, "cross_warp_sum", CROSS_WARP, x, y, probe, num_blocks=blocks)
    assert torch.equal(y[:, :128], x.sum(1, keepdim=True).expand(blocks, 128))
    assert torch.equal(y[:, 128], x[:, 32:48].max(1).values)
    assert torch.isnan(probe).all()  # lane 8 of warp 1 (tx 40) took no part in the shuffle


INTER_SYNC = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void inter_sync(__gm__ float* y, int32_t skipper) {
  if (int32_t(block_idx) == skipper) return;  // never arrives: the others' round cannot complete
  asc_sync_inter_arrive(PIPE_MTE3, 2);
  asc_sync_inter_wait(PIPE_MTE3, 2);
  y[block_idx] = 1.0f;
}
'''


def test_inter_block_sync_completes_and_names_the_blocks_that_never_arrive(twin_runtime):
    y = torch.zeros(16)
    launch_source(twin_runtime, "inter_sync", INTER_SYNC, y, -1, num_blocks=16)
    assert torch.equal(y, torch.ones(16))
    with pytest.raises(TwinLaunchError, match=r"asc_sync_inter_wait\(PIPE_MTE3, 2\): round 1 .*block 5 AIV returned "
                                              r"without arriving"):
        launch_source(twin_runtime, "inter_sync", INTER_SYNC, torch.zeros(16), 5, num_blocks=16)
    with pytest.raises(TwinLaunchError, match="needs all 80 AIV cores of the launch running at once"):
        launch_source(twin_runtime, "inter_sync", INTER_SYNC, torch.zeros(80), -1, num_blocks=80)


def test_batch_mode_starts_a_launch_only_when_all_its_cores_can_start(twin_runtime):
    """__schedmode__(1): every core of the launch starts at once, so one needing more cores of a kind than the
    chip has never starts; it is refused before any block runs."""
    batch = INTER_SYNC.replace("__global__ __vector__", "__global__ __schedmode__(1) __vector__")
    y = torch.zeros(64)
    launch_source(twin_runtime, "inter_sync", batch, y, -1, num_blocks=64)
    assert torch.equal(y, torch.ones(64))
    y = torch.zeros(65)
    with pytest.raises(TwinLaunchError, match=r"__schedmode__\(1\) \(batch mode\) starts a launch only when all its "
                                              r"cores are idle at once; it needs 65 AIV cores and the chip has 64"):
        launch_source(twin_runtime, "inter_sync", batch, y, -1, num_blocks=65)
    assert torch.equal(y, torch.zeros(65))
    mixed = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __schedmode__(1) __mix__(1, 2) void batch_mix(__gm__ float* y) {
  if ASC_IS_AIC { y[block_idx] = 1.0f; }
}
'''
    y = torch.zeros(33)
    launch_source(twin_runtime, "batch_mix", mixed, y, num_blocks=32)   # 32 AIC + 64 AIV: the whole chip
    assert torch.equal(y[:32], torch.ones(32))
    with pytest.raises(TwinLaunchError, match="it needs 33 AIC cores and the chip has 32"):
        launch_source(twin_runtime, "batch_mix", mixed, torch.zeros(33), num_blocks=33)


def test_run_on_twin_binds_views_by_their_data_name_and_takes_scalars(run_on_twin):
    import tilelang.ascend.language as T

    # Two views: TileLang names the kernel parameters after them and orders them its own way
    # (by name: ``Y, w_view, x_view``), so binding by position would swap A and B.
    @T.prim_func
    def two_views(A: T.Tensor((8, 64), "uint8"), B: T.Tensor((8, 64), "uint8"), Y: T.Tensor((8, 16), "float32"),
                  eps: T.float32):
        x_view = T.view(A, (8, 16), "float32")
        w_view = T.view(B, (8, 16), "float32")
        with T.Kernel(1):
            u = T.alloc_shared((8, 16), "float32")
            v = T.alloc_shared((8, 16), "float32")
            T.copy(x_view, u)
            T.copy(w_view, v)
            with T.SimtVF(threads=128):
                for i, j in T.Parallel(8, 16):
                    u[i, j] = u[i, j] * 2.0 - v[i, j] + eps
            T.copy(u, Y)

    a, b = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(8, 16)
    run_on_twin(two_views, a.view(torch.uint8), b.view(torch.uint8), y, 0.25)
    assert torch.equal(y, a * 2.0 - b + 0.25)
    with pytest.raises(TypeError, match="scalar eps: expected a Python number"):
        run_on_twin(two_views, a.view(torch.uint8), b.view(torch.uint8), y, torch.tensor(0.25))


def test_run_on_twin_passes_over_a_parameter_the_kernel_never_uses(run_on_twin):
    import tilelang.ascend.language as T

    # TileLang drops an unused parameter from the lowered entry (the libraries' kernels have such
    # parameters where a variant does not read an operand); the others still bind by name.
    @T.prim_func
    def unused_middle(X: T.Tensor((8, 16), "float32"), Unused: T.Tensor((4,), "float32"),
                      Y: T.Tensor((8, 16), "float32")):
        with T.Kernel(1):
            u = T.alloc_shared((8, 16), "float32")
            T.copy(X, u)
            with T.SimtVF(threads=128):
                for i, j in T.Parallel(8, 16):
                    u[i, j] = u[i, j] + 1.0
            T.copy(u, Y)

    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    y = torch.zeros(8, 16)
    run_on_twin(unused_middle, x, torch.zeros(4), y)
    assert torch.equal(y, x + 1.0)


SCALAR_DEV = r'''
#include <c_api/asc_simd.h>
// Block b reads x[b] past the DCache and writes it doubled past the DCache into y[b]; `past` moves the read
// beyond x's end. The DCache controls are checked (the twin has no scalar cache).
extern "C" __global__ __vector__ void scalar_dev(__gm__ int64_t* x, __gm__ int64_t* y, int32_t past) {
  asc_dcci_single(x + block_idx);
  asc_dcci_entire_out();
  asc_dcci_entire_all();
  const int64_t v = asc_load_dev(x + block_idx + past);
  asc_store_dev(y + block_idx, 2 * v + int64_t(asc_load_dev((__gm__ uint8_t*)(x + block_idx))));
}
'''


def test_scalar_reads_past_the_dcache_are_checked(twin_runtime):
    """asc_load_dev (asc-devkit asc_load_dev.md) reads GM as asc_store_dev writes it, range-checked; the asc_dcci
    controls (asc_dcci.md) are accepted, and asc_dcci_entire_ub, which the 950 lacks, fails to compile naming it."""
    x = torch.arange(1, 9, dtype=torch.int64) * 1000 + 7
    y = torch.zeros(8, dtype=torch.int64)
    launch_source(twin_runtime, "scalar_dev", SCALAR_DEV, x, y, 0, num_blocks=8)
    assert torch.equal(y, 2 * x + x % 256)
    with pytest.raises(TwinLaunchError, match="asc_load_dev"):
        launch_source(twin_runtime, "scalar_dev", SCALAR_DEV, x, torch.zeros(8, dtype=torch.int64), 1 << 20,
                      num_blocks=8)
    ub_dcci = SCALAR_DEV.replace("asc_dcci_entire_all();", "asc_dcci_entire_ub();").replace("scalar_dev",
                                                                                            "scalar_dev_ub")
    with pytest.raises(DeepJITError, match="asc_dcci_entire_ub is not supported on the Ascend 950"):
        twin_runtime.compile("scalar_dev_ub", ub_dcci)
