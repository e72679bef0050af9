"""Symbolic dimensions of TileLang Ascend kernels (deepjit.tilelang_route.dims): their values come off
the tensors' shapes (tensors sharing one must agree), a symbolic grid is evaluated from them, and one
lowering runs every size on the twin."""
import pytest
import torch

from deepjit.errors import DeepJITError
from deepjit.tilelang_route import dims

PLACES = (("n", ((0, 0), (1, 0))), ("m", ((2, 1),)))


def test_bind_reads_each_dimension_off_the_shapes():
    a, b, c = torch.zeros(5, 3), torch.zeros(5), torch.zeros(2, 7)
    assert dims.bind(PLACES, (a, b, c)) == {"n": 5, "m": 7}
    with pytest.raises(ValueError, match=r"symbolic dimension n: .*argument 0 dim 0 = 5, argument 1 dim 0 = 4"):
        dims.bind(PLACES, (a, torch.zeros(4), c))


def test_grid_formulas_are_integer_arithmetic_only():
    assert dims.num_blocks(6, {}) == 6
    assert dims.num_blocks("((n + 15) // 16) * (T.min(m, 4) % 3 - 1)", {"n": 33, "m": 9}) == 0
    assert dims.num_blocks("(n + 63) // 64 * 2", {"n": 65}) == 4
    for bad in ("__import__('os')", "n ** 2", "n.real", "k + 1", "n +", "os.min(n, 2)"):
        with pytest.raises(DeepJITError, match="unsupported block count formula"):
            dims.num_blocks(bad, {"n": 1})
    with pytest.raises(DeepJITError, match="divides by zero"):
        dims.num_blocks("n // (n - 1)", {"n": 1})


def test_one_lowering_runs_every_size_on_the_twin():
    pytest.importorskip("tilelang")
    import tilelang.ascend.language as T

    from deepjit.tilelang_route import run_on_twin

    n = T.dynamic("n")

    @T.prim_func
    def copy_rows(X: T.Tensor((n, 16), "float32"), Y: T.Tensor((n, 16), "float32")):
        with T.Kernel(T.ceildiv(n, 8)) as bid:
            x = T.alloc_shared((8, 16), "float32")
            rows = T.min(8, n - bid * 8)
            T.copy(X[bid * 8:bid * 8 + rows, :], x[0:rows, :])
            for r in T.serial(rows):
                T.copy(x[r, :], Y[bid * 8 + r, :])

    for rows in (3, 8, 21):
        x = torch.randn(rows, 16)
        y = torch.zeros(rows, 16)
        counters = run_on_twin(copy_rows, x, y)
        assert torch.equal(y, x) and counters.num_blocks == -(-rows // 8)
    with pytest.raises(ValueError, match="symbolic dimension n"):
        run_on_twin(copy_rows, torch.zeros(4, 16), torch.zeros(5, 16))
    with pytest.raises(ValueError, match=r"tensor Y: expected shape \('n', 16\), got \(4, 8\)"):
        run_on_twin(copy_rows, torch.zeros(4, 16), torch.zeros(4, 8))


def test_bind_reads_stride_places_off_the_strides():
    # (i, -1 - d) is the stride of dimension d of argument i
    t = torch.zeros(5, 24)
    assert dims.bind((("s0", ((0, -1),)), ("n", ((0, 0),))), (t,)) == {"s0": 24, "n": 5}


def test_symbolic_stride_of_a_strided_tensor_comes_off_the_tensor():
    pytest.importorskip("tilelang")
    import tilelang.ascend.language as T

    from deepjit.tilelang_route import run_on_twin

    n, s0 = T.dynamic("n"), T.dynamic("s0", dtype="int64")

    @T.prim_func
    def copy_strided(X: T.StridedTensor(shape=[n, 32], strides=[s0, 1], dtype="float32"),
                     Y: T.Tensor((n, 32), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((32,), "float32")
            for r in T.serial(n):
                T.copy(X[r, :], x)
                T.copy(x, Y[r, :])

    # 5 rows of 32: the row stride (32) is no extent of the tensor, so binding s0 from anything but the
    # tensor's stride reads the wrong rows
    x = torch.randn(5, 32)
    y = torch.zeros(5, 32)
    run_on_twin(copy_strided, x, y)
    assert torch.equal(y, x)

    @T.prim_func
    def copy_fixed_stride(X: T.StridedTensor(shape=[4, 32], strides=[64, 1], dtype="float32"),
                          Y: T.Tensor((4, 32), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((32,), "float32")
            for r in T.serial(4):
                T.copy(X[r, :], x)
                T.copy(x, Y[r, :])

    with pytest.raises(ValueError, match="tensor X: expected stride 0 of 64 elements, got 32"):
        run_on_twin(copy_fixed_stride, torch.zeros(4, 32), torch.zeros(4, 32))


def test_strides_that_follow_from_a_symbolic_shape_need_no_binding():
    pytest.importorskip("tilelang")
    import tilelang.ascend.language as T

    from deepjit.tilelang_route import run_on_twin

    n = T.dynamic("n")

    @T.prim_func
    def copy_planes(X: T.Tensor((2, n, 16), "float32"), Y: T.Tensor((2, n, 16), "float32")):
        # X's leading stride is 16 * n: an expression of the shape, not a parameter
        with T.Kernel(2) as p:
            x = T.alloc_shared((16,), "float32")
            for r in T.serial(n):
                T.copy(X[p, r, :], x)
                T.copy(x, Y[p, r, :])

    x = torch.randn(2, 3, 16)
    y = torch.zeros(2, 3, 16)
    run_on_twin(copy_planes, x, y)
    assert torch.equal(y, x)
