"""``ElasticBuffer``'s V2.1 Engram and AGRS methods refuse every bad dtype, shape, rank or count with a
ValueError or TypeError naming the argument, before any work: after each refusal the Engram table still
serves the rows last written and the AGRS session's next slot is still free (same bytes handed out).
One process: a one-rank gloo group over a HashStore, one buffer for the module."""
import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ENTRIES, HIDDEN, ROWS = 24, 64, 12     # table rows, row width, entries fetched at once (the size hint's)
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
GPU_BYTES = CPU_BYTES = 2 << 20        # fetched rows and the table: the size hint's 2 MiB alignment
FETCH_LIMIT = GPU_BYTES // (2 * HIDDEN)  # entries one fetch may ask for: what the GPU part holds
SESSION_BYTES, GATHERS = 1 << 14, 4
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def buf():
    import deep_ep
    assert not dist.is_initialized(), "this module makes its own one-rank group"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        gpu, cpu = deep_ep.ElasticBuffer.get_engram_storage_size_hint(ENTRIES, HIDDEN, ROWS, BF16)
        assert (gpu, cpu) == (GPU_BYTES, CPU_BYTES)
        b = deep_ep.ElasticBuffer(dist.group.WORLD, num_bytes=gpu + cpu, num_cpu_bytes=cpu, num_allocated_qps=2,
                                  explicitly_destroy=True)
        b.table = torch.randn(ENTRIES, HIDDEN, generator=torch.Generator().manual_seed(7)).to(BF16)
        b.engram_write(b.table)
        b.agrs_set_config(SESSION_BYTES, GATHERS)
        yield b
        b.destroy()
    finally:
        dist.destroy_process_group()


def _refused(call, names):
    """``call`` raises ValueError/TypeError whose message names one of ``names``."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert any(n in str(info.value) for n in names), f"{info.value!r} names none of {names}"


def _table_intact(buf):
    ids = torch.arange(ROWS, dtype=torch.int32).view(3, 4) * 2 % ENTRIES
    data, sf = buf.engram_fetch(ids)()
    assert sf is None and torch.equal(data.view(torch.uint8), buf.table[ids.view(-1)].reshape(3, -1).view(torch.uint8))


dims = st.integers(1, 6)
not_a_tensor = st.sampled_from([None, 3, 2.5, "x", [[1, 2]]])
not_a_dtype = st.sampled_from([None, "bfloat16", 2, float, torch.Size([2])])


@st.composite
def bad_engram_write(draw):
    """``(storage, sf, names)``: one defect per example, each a separate behaviour."""
    n, h = draw(st.integers(1, ENTRIES)), draw(st.sampled_from([16, 32, HIDDEN]))
    kind = draw(st.sampled_from(["type", "dtype", "rank", "empty", "strided", "too big", "sf for bf16",
                                 "no sf for fp8", "sf type", "sf dtype", "sf rank", "sf rows", "sf no packs"]))
    storage, sf = torch.zeros(n, h, dtype=BF16), None
    fp8, packs = torch.zeros(n, h, dtype=FP8), draw(st.integers(1, 4))
    if kind == "type":
        storage = draw(not_a_tensor)
    elif kind == "dtype":
        storage = torch.zeros(n, h, dtype=draw(st.sampled_from([torch.float32, torch.float16, torch.int32, torch.uint8])))
    elif kind == "rank":
        storage = torch.zeros(draw(st.lists(dims, max_size=4).filter(lambda s: len(s) != 2)), dtype=BF16)
    elif kind == "empty":
        storage = torch.zeros((0, h) if draw(st.booleans()) else (n, 0), dtype=BF16)
    elif kind == "strided":
        storage = torch.zeros(h, n + 1, dtype=BF16).T
    elif kind == "too big":
        storage = torch.zeros(CPU_BYTES // (2 * HIDDEN) + draw(st.integers(1, 8)), HIDDEN, dtype=BF16)
    elif kind == "sf for bf16":
        sf = torch.ones(n, packs)
    elif kind == "no sf for fp8":
        storage = fp8
    else:
        storage = fp8
        sf = {"sf type": draw(not_a_tensor), "sf dtype": torch.ones(n, packs, dtype=torch.float64),
              "sf rank": torch.ones(n * packs), "sf rows": torch.ones(n + draw(st.integers(1, 3)), packs),
              "sf no packs": torch.ones(n, 0)}[kind]
    return storage, sf, ("sf",) if kind.startswith("sf") or "sf for" in kind else ("storage", "sf")


@HYP
@given(bad_engram_write())
def test_engram_write_refuses_before_writing(buf, case):
    storage, sf, names = case
    _refused(lambda: buf.engram_write(storage, sf=sf), names)
    _table_intact(buf)


@st.composite
def bad_engram_fetch(draw):
    """``(indices, num_qps, names)``."""
    t, k = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    ok = torch.zeros(t, k, dtype=torch.int32)
    kind = draw(st.sampled_from(["type", "dtype", "rank", "too many", "negative id", "id past the table",
                                 "qps type", "qps range"]))
    if kind == "type":
        return draw(not_a_tensor), 0, ("indices",)
    if kind == "dtype":
        return ok.to(draw(st.sampled_from([torch.int64, torch.int16, torch.float32]))), 0, ("indices",)
    if kind == "rank":
        shape = draw(st.lists(dims, max_size=4).filter(lambda s: len(s) != 2))
        return torch.zeros(shape, dtype=torch.int32), 0, ("indices",)
    if kind == "too many":
        return torch.zeros(FETCH_LIMIT + draw(st.integers(1, 8)), 1, dtype=torch.int32), 0, ("indices",)
    if kind in ("negative id", "id past the table"):
        bad = ok.clone()
        bad[draw(st.integers(0, t - 1)), draw(st.integers(0, k - 1))] = (
            -draw(st.integers(1, 1000)) if kind == "negative id" else ENTRIES + draw(st.integers(0, 1000)))
        return bad, 0, ("indices",)
    if kind == "qps type":
        return ok, draw(st.sampled_from([True, 1.0, "1", None])), ("num_qps",)
    return ok, draw(st.sampled_from([-1, 3, 1 << 40])), ("num_qps",)


@HYP
@given(bad_engram_fetch())
def test_engram_fetch_refuses(buf, case):
    indices, num_qps, names = case
    _refused(lambda: buf.engram_fetch(indices, num_qps=num_qps), names)
    _table_intact(buf)


bad_shape = st.one_of(
    st.tuples(dims, st.integers(-5, -1)),                                  # a negative dim
    st.tuples(dims, st.sampled_from([1.5, "3", None])),                   # a dim that is no int
    st.sampled_from([[], (), 5, "3x5", None]),                            # no shape at all
    st.lists(st.sampled_from([(2, 3), 4, "x", (1, -2)]), min_size=1, max_size=3).filter(
        lambda s: not all(isinstance(e, int) for e in s) and s != [(2, 3)] * len(s)))


@st.composite
def bad_agrs_inplace(draw):
    if draw(st.booleans()):
        return (2, 3), draw(not_a_dtype), ("dtype",)
    return draw(bad_shape), BF16, ("shapes",)


def _next_slot(buf) -> int:
    return buf.agrs_get_inplace_tensor((4, 8), BF16).data_ptr()


@HYP
@given(bad_agrs_inplace())
def test_agrs_inplace_tensor_refuses_without_taking_a_slot(buf, case):
    shapes, dtype, names = case
    with buf.agrs_new_session():
        before = _next_slot(buf)
        _refused(lambda: buf.agrs_get_inplace_tensor(shapes, dtype), names)
        _refused(lambda: buf.get_agrs_num_max_session_bytes(dist.group.WORLD, shapes, dtype), names)
        assert _next_slot(buf) == before


@HYP
@given(st.one_of(not_a_tensor, st.just([]), st.just(()),
                 st.lists(st.one_of(st.just(torch.ones(3)), not_a_tensor), min_size=1, max_size=3).filter(
                     lambda ts: not all(isinstance(t, torch.Tensor) for t in ts)),
                 st.builds(lambda n: torch.ones(n + 1, 4).T, dims)))
def test_all_gather_refuses_without_taking_a_slot(buf, t):
    with buf.agrs_new_session():
        before = _next_slot(buf)
        _refused(lambda: buf.all_gather(t), ("t: expected a tensor or a non-empty sequence of tensors, got an empty sequence",
                                            *(f"t[{i}]: expected a" for i in range(3))))
        assert _next_slot(buf) == before
        x = buf.agrs_get_inplace_tensor((4, 8), BF16)   # and the slot still gathers
        x.fill_(3)
        out, handle = buf.all_gather(x)
        handle()
        assert out.shape == (1, 4, 8) and bool((out == 3).all())


@HYP
@given(st.sampled_from(["num_max_session_bytes", "num_max_all_gathers_per_session"]),
       st.sampled_from([0, -1, True, 2.0, "8", None, 1 << 40, 33]))
def test_agrs_set_config_refuses_and_keeps_the_old_config(buf, name, value):
    if name == "num_max_all_gathers_per_session" and value == 1 << 40 or name == "num_max_session_bytes" and value == 33:
        value = 0  # 33 bytes and 2^40 gathers are too small / too big only for the other argument
    args = {"num_max_session_bytes": SESSION_BYTES, "num_max_all_gathers_per_session": GATHERS, name: value}
    _refused(lambda: buf.agrs_set_config(**args), (name,))
    with buf.agrs_new_session():   # the previous config still serves
        assert buf.agrs_get_inplace_tensor((SESSION_BYTES // 2,), torch.uint8).numel() == SESSION_BYTES // 2
