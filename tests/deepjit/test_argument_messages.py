"""deepjit argument errors no other test reaches, each with its full message
(``"<name>: expected <what>, got <value>"``) and exception type: Config, Runtime and option merging,
launch-argument packing, the TileLang route's specs and architecture names, and the symmetric windows'
arguments (one process; the windows over a one-rank gloo group on a HashStore)."""
import ctypes

import numpy as np
import pytest
import torch

import deepjit
from deepjit.backends.args import to_ctype
from deepjit.backends.host.options import HostCompilerOptions
from deepjit.symm import DeviceWindow, SymmetricWindow
from deepjit.tilelang_route.hook import parse_arch
from deepjit.tilelang_route.lowering import AscendKernelSpec
from tests.testkit.distributed import one_rank_group
from tests.testkit.errors import refused


def test_config_runtime_and_options():
    refused(TypeError, "extra_signature: expected str or bytes, got int", deepjit.Config, "/lib", "TST",
             extra_signature=3)
    refused(TypeError, "include_prefixes: expected str entries, got int", deepjit.Config, "/lib", "TST",
             include_prefixes=("a/", 3))
    refused(TypeError, "config: expected a deepjit.Config, got dict", deepjit.Runtime, {})
    refused(TypeError, "options: expected HostCompilerOptions, got int", HostCompilerOptions().override_with, 3)


def test_launch_argument_packing():
    refused(TypeError, "argument 1: expected a numpy scalar of a supported type, got complex64", to_ctype, 1,
             np.complex64(1))
    refused(TypeError, "argument 2: expected ctypes.c_bool or an int of the kernel's width for a bool, got True",
             to_ctype, 2, True)
    refused(ValueError, f"argument 3: expected a value that fits in int64, got {1 << 63}", to_ctype, 3, 1 << 63)
    assert to_ctype(0, ctypes.c_bool(True)).value is True


def test_tilelang_route_names():
    refused(ValueError, "arch: expected an Ascend architecture like 'dav-3510', got 'dav-x'", parse_arch, "dav-x")
    refused(ValueError, "name: expected only letters, digits, or underscores (an AscendKernelSpec), got 'a-b'",
             AscendKernelSpec, "a-b", lambda: None, "vector")


def test_window_sizes_before_any_group_is_touched():
    refused(ValueError, "num_bytes: expected a non-negative int, got -1", SymmetricWindow.create, None, -1)
    refused(ValueError, "num_signals: expected a non-negative int, got 1.5", SymmetricWindow.create, None, 64,
             num_signals=1.5)
    refused(ValueError, "reserve_bytes: expected a non-negative int, got -8", SymmetricWindow.create, None, 64,
             reserve_bytes=-8)
    refused(ValueError, "num_flags: expected a non-negative int, got True", DeviceWindow.create, None, 64, True)
    refused(ValueError, "device: expected cpu (the Ascend twin) or npu, got cuda", DeviceWindow.create, None, 64,
             device="cuda")


@pytest.fixture(scope="module")
def group():
    with one_rank_group() as g:
        yield g


def test_window_arguments(group):
    win = SymmetricWindow.create(group, 256, name_hint="argmsg", num_signals=4, timeout_s=5)
    try:
        refused(ValueError, "shape: expected non-negative sizes, got (2, -1)", win.tensor, 0, torch.int8, (2, -1))
        refused(ValueError, "offset: expected a range inside the window's 256 data bytes, got [200, 264)",
                 win.own_tensor, 200, 64)
        refused(ValueError, "slot: expected a signal slot in [0, 4), got 4", win.signal_address, 0, 4)
    finally:
        win.destroy()
    dev = DeviceWindow.create(group, 256, 8, name_hint="argmsgd", device="cpu")
    try:
        src = torch.zeros(16, dtype=torch.uint8)
        refused(ValueError, "src: expected a non-empty contiguous tensor, got shape (0,), strides (1,)",
                 dev.put_signal, src[:0], 0, 0, 0)
        refused(ValueError, "peer: expected a rank in [0, 1) for DeviceWindow.put_signal, got 1",
                 dev.put_signal, src, 1, 0, 0)
        refused(ValueError, "offset: expected a byte range inside the window's 256 data bytes for "
                 "DeviceWindow.put_signal, got bytes [248, 264)", dev.put_signal, src, 0, 248, 0)
        refused(ValueError, "flag: expected a flag in [0, 8) for DeviceWindow.wait_get, got 8",
                 dev.wait_get, src, 0, 8, 1)
        refused(ValueError, "num_blocks: expected a positive int for DeviceWindow.wait_get, got 0",
                 dev.wait_get, src, 0, 0, 1, num_blocks=0)
    finally:
        dev.destroy()
