"""What a call runs around its kernel launches (deepjit's runtime): the kernels' names, and the aten ops issued
outside them (a launcher's own argument handling counts as its launch's). ``VIEW_OPS`` make views and compute
nothing: a call whose outside ops are all among them is its launches alone, as a captured graph replays it."""
from __future__ import annotations

import collections

from torch.utils._python_dispatch import TorchDispatchMode

VIEW_OPS = frozenset({"aten.view", "aten.alias", "aten.detach", "aten.transpose", "aten.t", "aten.select", "aten.slice",
                      "aten._unsafe_view", "aten.as_strided", "aten.expand", "aten.unsqueeze", "aten.squeeze",
                      "aten.permute"})


class OpsAroundLaunches(TorchDispatchMode):
    """``with OpsAroundLaunches() as ops: call()`` -> ``ops.kernels`` (names, in launch order) and ``ops.outside``
    (aten op name -> count)."""

    def __init__(self):
        super().__init__()
        self.outside, self.kernels, self._launching = collections.Counter(), [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._launching:
            self.outside[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        import deepjit.runtime
        self._launch = launch = deepjit.runtime.Runtime.launch

        def recorded(runtime, kernel, *args):
            self.kernels.append(kernel.name)
            self._launching += 1
            try:
                return launch(runtime, kernel, *args)
            finally:
                self._launching -= 1

        deepjit.runtime.Runtime.launch = recorded
        return super().__enter__()

    def __exit__(self, *exc):
        import deepjit.runtime
        deepjit.runtime.Runtime.launch = self._launch
        return super().__exit__(*exc)
