"""deepjit.validation: one message shape, and the aliasing rules for caller-given outputs."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepjit import validation as V


def test_messages_name_the_argument_what_was_expected_and_what_came():
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor, got list$"):
        V.tensor("x", [1])
    with pytest.raises(TypeError, match=r"^x: expected dtype torch.float32, got torch.int32$"):
        V.tensor("x", torch.zeros(2, dtype=torch.int32), dtypes=(torch.float32,))
    with pytest.raises(ValueError, match=r"^x: expected a 3-D tensor, got shape \(2,\)$"):
        V.tensor("x", torch.zeros(2), ndim=3)
    with pytest.raises(ValueError, match=r"^x: expected shape \(4, \*\), got \(2, 3\)$"):
        V.tensor("x", torch.zeros(2, 3), shape=(4, None))
    with pytest.raises(ValueError, match=r"^x: expected a contiguous tensor, got strides \(1, 2\)"):
        V.tensor("x", torch.zeros(2, 2).t(), contiguous=True)
    with pytest.raises(ValueError, match=r"^x: expected device meta \(the device of y\), got cpu$"):
        V.tensor("x", torch.zeros(1), device=torch.device("meta"), like="y")
    with pytest.raises(ValueError, match=r"^n: expected a value >= 1, got 0$"):
        V.integer("n", 0, 1)
    with pytest.raises(ValueError, match=r"^n: expected a value in \[0, 3\], got 4$"):
        V.integer("n", 4, 0, 3)
    with pytest.raises(TypeError, match=r"^n: expected an int, got bool$"):
        V.integer("n", True)
    with pytest.raises(ValueError, match=r"^f: expected one of \('a', 'b'\), got 'c'$"):
        V.choice("f", "c", ("a", "b"))
    with pytest.raises(ValueError, match=r"^s: expected a finite number, got inf$"):
        V.number("s", float("inf"), finite=True)
    with pytest.raises(ValueError, match=r"^b: expected device cpu \(the device of a\), got meta$"):
        V.same_device(("a", torch.zeros(1)), ("skipped", None), b=torch.zeros(1, device="meta"))


def test_output_rejects_zero_strides_and_self_overlap():
    with pytest.raises(ValueError, match="d: expected an output whose elements do not overlap"):
        V.output("d", torch.zeros(1, 16).expand(8, 16))
    with pytest.raises(ValueError, match="do not overlap"):
        V.output("d", torch.zeros(20).as_strided((4, 4), (2, 1)))
    V.output("d", torch.zeros(4, 4).t())
    V.output("d", torch.zeros(8, 8)[:, ::2])
    V.output("d", torch.zeros(0, 4).expand(0, 4))


def test_output_rejects_sharing_memory_with_an_input_naming_both():
    x = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="out: expected memory disjoint from x, got out overlapping x"):
        V.output("out", x[:4], ("x", x))
    storage = torch.zeros(64)
    with pytest.raises(ValueError, match="disjoint from b\\[1\\]"):
        V.output("d", storage[:32].view(4, 8), ("b[1]", storage[16:48]))
    V.output("out", x[:4], ("y", x[4:]), ("absent", None))


def test_in_place_inputs_may_be_the_output_itself_only():
    d = torch.zeros(4, 4)
    V.output("d", d, ("c", d), in_place=("c",))
    V.output("d", d, ("c", d.view(4, 4)), in_place=("c",))
    with pytest.raises(ValueError, match="disjoint from c"):
        V.output("d", d, ("c", d[:2]), in_place=("c",))
    with pytest.raises(ValueError, match="disjoint from c"):
        V.output("d", d, ("c", d), in_place=())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 12)), min_size=1, max_size=3))
def test_self_overlap_matches_a_brute_force_count(dims):
    sizes, strides = zip(*dims, strict=True)
    span = sum((s - 1) * st for s, st in dims) + 1
    t = torch.zeros(span).as_strided(sizes, strides)
    idx = torch.arange(span, dtype=torch.float32).as_strided(sizes, strides)
    distinct = idx.unique().numel() == idx.numel()
    if not V.self_overlapping(t):
        assert distinct  # never lets an output with two elements at one address through
    if any(st == 0 and sz > 1 for sz, st in dims) or not distinct:
        assert V.self_overlapping(t)


def test_allocation_refuses_more_than_the_free_memory_naming_the_argument():
    V.allocation("n", 1 << 20, torch.device("cpu"), "a 1 MiB table")  # fits
    with pytest.raises(ValueError, match=r"n: expected a size whose a 1 PiB table fits the .* GiB free on cpu, "
                                         r"got 1048576\.0 GiB"):
        V.allocation("n", 1 << 50, torch.device("cpu"), "a 1 PiB table")


def test_a_meta_tensor_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match=r"^kv: expected a tensor with data, got a meta tensor$"):
        V.tensor("kv", torch.empty(2, 3, device="meta"))
    assert V.tensor("kv", torch.empty(2, 3)) is not None
