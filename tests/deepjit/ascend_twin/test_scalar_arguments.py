"""Plain Python numbers passed to a twin kernel are packed as the entry declares its parameters
(a float parameter gets 4 bytes, an int32 4 bytes), as the NPU path packs them."""
import torch

from .conftest import launch_source

FILL = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void fill_scalar(__gm__ float* y, float value, int32_t n, float scale) {
  for (int32_t i = 0; i < n; ++i) y[i] = value * scale;
}
'''


def test_float_and_int32_parameters_take_plain_python_numbers(twin_runtime):
    y = torch.zeros(16)
    launch_source(twin_runtime, "fill_scalar", FILL, y, 1.5, 10, 3.0)
    assert torch.equal(y, torch.tensor([4.5] * 10 + [0.0] * 6))
