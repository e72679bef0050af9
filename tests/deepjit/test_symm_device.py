"""deepjit.symm.DeviceWindow on the Ascend twin across two real processes (gloo): a kernel on rank 0
puts into rank 1's window and signals, a kernel on rank 1 waits for the flag and reads what landed;
a stray write past the window is refused naming the window, and a wait nobody answers times out
naming rank and flag."""
import os

import torch

from tests.testkit.distributed import run_ranks

DATA, FLAGS = 48 * 1024, 8
SENT = 40000          # three 16 KiB kernel chunks, the last one ragged, over two blocks


def _payload():
    return torch.randint(-128, 128, (SENT,), dtype=torch.int8, generator=torch.Generator().manual_seed(7))


def _ranks(rank, world, hint):
    import torch.distributed as dist

    from deepjit.backends.ascend_twin.kernel import TwinLaunchError
    from deepjit.symm import DeviceWindow
    from deepjit.symm.kernels import ascend_args, put_signal_kernel, wait_get_kernel

    win = DeviceWindow.create(None, DATA, FLAGS, name_hint=hint, timeout_s=30)
    out = {"table": [int(b) for b in win.bases] == [win._window.data_ptr(r) for r in range(world)]}
    if rank == 0:
        win.put_signal(_payload(), peer=1, offset=1024, flag=2, num_blocks=2)
    else:  # waits in its kernel, possibly before rank 0's kernel has started
        got = torch.empty(SENT, dtype=torch.int8)
        win.wait_get(got, offset=1024, flag=2, value=2, num_blocks=2)
        out["got"] = torch.equal(got, _payload())
        out["landed"] = torch.equal(win.data(1, torch.int8, (SENT,), 1024), _payload())
    dist.barrier()
    out["flags"] = win.flags(rank).tolist()
    out["own_untouched"] = bool((win.data(0, torch.int8, (DATA,)) == 0).all()) if rank == 0 else None
    # A put that runs past the end of rank 1's window: the twin refuses the access, naming the window.
    if rank == 0:
        try:
            put_signal_kernel()(1, ascend_args("DjSymmPutSignalArgs", src=torch.ones(4096, dtype=torch.uint8),
                                               **win.kernel_fields(), dst_offset=DATA - 100, num_bytes=4096, peer=1,
                                               flag=3, value=1, pad=0))
        except TwinLaunchError as exc:
            out["stray"] = str(exc)
    dist.barrier()
    # A wait nobody answers (flag 5 of rank 1) fails the launch within its timeout, naming rank and flag.
    if rank == 1:
        fields = win.kernel_fields() | {"symm_timeout_ns": 300_000_000}
        try:
            wait_get_kernel()(1, ascend_args("DjSymmWaitGetArgs", dst=torch.empty(64, dtype=torch.uint8), **fields,
                                             src_offset=0, num_bytes=64, flag=5, value=1))
        except TwinLaunchError as exc:
            out["timeout"] = str(exc)
    out["flags_after"] = win.flags(rank).tolist()
    dist.barrier()
    win.destroy()
    return out


def test_kernel_put_signal_wait_across_processes():
    hint = f"d{os.getpid()}"
    zero = [0] * FLAGS
    outs = run_ranks(_ranks, 2, hint, timeout=240)
    assert outs[0]["table"] and outs[1]["table"]
    assert outs[1]["got"] and outs[1]["landed"]
    assert outs[1]["flags"] == [0, 0, 2, 0, 0, 0, 0, 0] and outs[0]["flags"] == zero
    assert outs[0]["own_untouched"]
    stray = outs[0]["stray"]
    # window offsets count the 512 flag bytes: data byte DATA - 100 is window byte DATA + 412
    assert f"symm window {hint} of rank 1 offset {DATA + 412}, 4096 bytes, is outside [0, {DATA + 512})" in stray, stray
    assert outs[1]["flags_after"][3] == 0   # the failed put signalled nothing
    timeout = outs[1]["timeout"]
    assert "rank 1" in timeout and "flag 5" in timeout and "never signalled" in timeout, timeout
