"""tile_kernels' backend table: every public op registers its reference, host and Ascend implementations
here, next to the op (``TABLE.register`` / ``TABLE.add_ascend`` in the op's module)."""
import deepjit

from ._lib import LIB

TABLE = deepjit.BackendTable(LIB)
