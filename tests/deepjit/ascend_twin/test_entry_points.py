"""The twin's user-facing entry points: run_on_twin writes the outputs into the caller's tensors, and
the twin's JIT cache entries carry its toolchain name and version in meta.json."""
import json

import torch

from deepjit.tilelang_route.conformance import BY_NAME

from ..helpers import list_entries

ADD_ONE = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(64) inline void add_one(__ubuf__ float* ub) { ub[threadIdx.x] += 1.0f; }
extern "C" __global__ __vector__ void twin_add_one(__gm__ float* x) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  asc_copy_gm2ub_align(ub, (__gm__ uint8_t*)x, 1, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_V, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_V, static_cast<event_t>(0));
  asc_vf_call<add_one>(cce::dim3(64), (__ubuf__ float*)ub);
  asc_sync_notify(PIPE_V, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_V, PIPE_MTE3, static_cast<event_t>(0));
  asc_copy_ub2gm_align((__gm__ uint8_t*)x, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
}
'''


def test_run_on_twin_writes_outputs_in_place(run_on_twin):
    case = BY_NAME["copy_padded_rows"]
    a, b = case.inputs(torch.Generator().manual_seed(1))
    a_before, b_ptr = a.clone(), b.data_ptr()
    run_on_twin(case.build(), a, b)
    assert b.data_ptr() == b_ptr  # the caller's tensor itself holds the result
    assert torch.equal(b[:, :37], a_before) and torch.equal(a, a_before)
    assert (b[:, 37:].contiguous().view(torch.uint8) == 0xA5).all()  # columns the kernel does not own


def test_twin_cache_entry_names_its_toolchain(tmp_path, monkeypatch):
    import deepjit
    from deepjit.backends.ascend_twin import NAME, VERSION, AscendLaunchOptions
    from deepjit.tilelang_route import route_config

    monkeypatch.setenv("TL_ASCEND_JIT_CACHE_DIR", str(tmp_path / "cache"))
    runtime = deepjit.Runtime(route_config(), "ascend_twin")
    x = torch.arange(64, dtype=torch.float32)
    runtime.compile("twin_add_one", ADD_ONE).launch(AscendLaunchOptions(num_blocks=1, num_ubuf_bytes=0, num_launch_timeout_secs=0), x)
    assert torch.equal(x, torch.arange(64, dtype=torch.float32) + 1)
    # besides the kernel: the twin's precompiled header prelude (one per header version)
    (entry,) = [e for e in list_entries(tmp_path / "cache") if not e.startswith("ascend_twin_prelude.")]
    assert entry.startswith("twin_add_one.")
    meta = json.loads((tmp_path / "cache" / "cache" / entry / "meta.json").read_text())
    assert NAME == "ascend-twin"
    assert meta["compiler_info"]["name"] == NAME and meta["compiler_info"]["version"] == VERSION
    # The toolchain's version is in the key: the same source under another version is another entry.
    assert runtime.cache_key(ADD_ONE) in entry
    from deepjit.backends.ascend_twin import toolchain
    monkeypatch.setattr(toolchain, "VERSION", VERSION + ".next")
    assert deepjit.Runtime(route_config(), "ascend_twin").cache_key(ADD_ONE) != runtime.cache_key(ADD_ONE)
