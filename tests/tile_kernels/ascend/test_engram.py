"""tile_kernels.ascend.engram's kernel entry points on the Ascend twin against the reference, at the
kernels' tile boundaries: hidden sizes past a core's tile, partial counts past a staging step, token
ranges per block (more blocks than tokens), hash rows past a core's tile, with zero-size and NaN/Inf
inputs inside those tiles (the same entries non-finite as in the reference); fused_weight bit-exact,
grad_w_reduce, engram_gate_fwd and engram_gate_bwd within upstream's calc_diff bounds; and the forms the
table leaves to the reference on Ascend. The public ops' contract (through the table, the Ascend kernels
serving it) runs on every backend in tests/tile_kernels/engram/."""
import pytest
import torch

from tile_kernels import _dispatch
from tile_kernels.ascend import engram
from tile_kernels.ascend._case_kit import calc_diff_differences, gate_inputs
from tile_kernels.reference import engram as ref
from tile_kernels.testing.numeric import assert_equal


def assert_close(got: torch.Tensor, want: torch.Tensor, bound: float) -> None:
    assert not calc_diff_differences("out", got, want, bound)


def _weights(hc, h, dtype_h, dtype_e, seed=0):
    g = torch.Generator().manual_seed(seed)
    wh, we = torch.randn(hc, h, generator=g).to(dtype_h), torch.randn(hc, h, generator=g).to(dtype_e)
    if hc and h > 2:
        wh[0, 1], we[1 % hc, 2], we[0, 0] = float("nan"), float("inf"), -float("inf")
    return wh, we


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("hc,h", [(3, 200), (4, 1100), (0, 64)])  # 4400 elements: two tiles, a tail
def test_fused_weight(dtypes, hc, h):
    wh, we = _weights(hc, h, *dtypes)
    assert_equal(engram.fused_weight(wh, we).nan_to_num(7.0), ref.fused_weight(wh, we).nan_to_num(7.0))


@pytest.mark.parametrize("nb,hc,h", [(11, 3, 200), (3, 4, 1100), (0, 4, 64), (2, 0, 64)])
def test_grad_w_reduce(nb, hc, h):
    wh, we = _weights(hc, h, torch.bfloat16, torch.float32, seed=nb)
    partial = torch.randn(nb, hc, h)
    gh, ge = torch.randn(hc, h), torch.randn(hc, h)
    want_h, want_e = gh.clone(), ge.clone()
    ref.grad_w_reduce(partial, wh, we, want_h, want_e)
    engram.grad_w_reduce(partial, wh, we, gh, ge)
    assert_close(gh, want_h, 1e-10)
    assert_close(ge, want_e, 1e-10)


@pytest.mark.parametrize("t,hc,h,special", [(6, 4, 300, True), (3, 4, 2100, False), (0, 4, 64, False)])
def test_gate_fwd(t, hc, h, special):
    x, k, v, w = gate_inputs(t, hc, h, special)
    got = engram.engram_gate_fwd(x, k, v, w, 1e-20, 1e-6, True)
    want = ref.engram_gate_fwd(x, k, v, w, 1e-20, 1e-6, True)
    for a, b in zip(got, want, strict=True):
        assert_close(a, b, 2e-10)
    if special:
        assert torch.isnan(got[0][1, 0]).all() and torch.isnan(got[2][2, 1])  # the NaN row, the inf row's gate
    unsaved = engram.engram_gate_fwd(x, k, v, w, 1e-20, 1e-6, False)
    assert unsaved[1:] == (None, None, None, None)
    assert_equal(unsaved[0], got[0])


@pytest.mark.parametrize("t,hc,h,nb,special", [(7, 4, 300, 3, True), (2, 4, 1100, 5, False), (0, 4, 64, 2, False)])
def test_gate_bwd(t, hc, h, nb, special):
    """Two token ranges per block and more blocks than tokens (empty ranges: zero partials); a NaN / inf row
    and a gate whose |s| is under the clamp (d_s = 0) in the special case."""
    x, k, v, w = gate_inputs(t, hc, h, special, seed=1)
    grad = torch.randn(t, hc, h).bfloat16()
    saved = list(ref.engram_gate_fwd(x, k, v, w, 1e-20, 1e-6)[1:])
    clamp = 1e-6
    if special:
        grad[5, 3, 1] = float("nan")
        saved[0][6, 0] = 0.0  # s = 0 < clamp: no gradient through the gate
    got = engram.engram_gate_bwd(grad, x, k, v, w, *saved, clamp, nb)
    want = ref.engram_gate_bwd(grad, x, k, v, w, *saved, clamp, nb)
    for a, b in zip(got, want, strict=True):
        assert_close(a, b, 1e-8)
    empty = [i for i in range(nb) if t * i // nb == t * (i + 1) // nb]
    assert not got[3][empty].any()  # a block with no tokens: zeros


def _hash_inputs(num_layers, t, n, m, seed=0):
    """Ids over the whole int32 range (negative ones too), int64 multipliers whose products wrap, vocab
    sizes of 1 and near 2^31 (offsets that wrap int32, as the reference's cast)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-2**31, 2**31 - 1, (t, n), dtype=torch.int32, generator=g)
    mult = torch.randint(-2**62, 2**62, (num_layers, n), dtype=torch.int64, generator=g)
    vocab = torch.randint(1, 2**31 - 1, (num_layers, n - 1, m), dtype=torch.int32, generator=g)
    if vocab.numel():
        vocab[0, 0, 0] = 1
    return ids, mult, vocab, ref.make_offsets(vocab)


@pytest.mark.parametrize("num_layers,t,n,m", [(2, 70, 3, 4), (2, 5, 3, 4), (2, 0, 3, 4)])
def test_engram_hash(num_layers, t, n, m):
    args = _hash_inputs(num_layers, t, n, m)
    assert_equal(engram.engram_hash(*args), ref.engram_hash_ref(*args))


def test_forms_left_to_the_reference(monkeypatch):
    """The forms the Ascend kernels leave to the reference: hidden size 0, a non-contiguous gradient output,
    more rows a token than a core's UB plan, a hash table past a core's UB budget (the public ops on the
    kernels' forms: tests/tile_kernels/engram/, on every backend)."""
    monkeypatch.setenv("TK_BACKEND", "ascend")
    serves = _dispatch.TABLE.serves
    wh, we = _weights(4, 256, torch.bfloat16, torch.float32)
    x, k, v, w = gate_inputs(5, 4, 256)
    empty_h = torch.zeros(5, 4, 0, dtype=torch.bfloat16)
    assert serves("engram_gate_fwd", x.device, x, k, v, w, 1e-20, 1e-6, True) == "ascend"
    assert serves("engram_gate_fwd", x.device, empty_h, empty_h, empty_h[:, 0], w[:, :0], 1e-20, 1e-6,
                  True) == "reference"
    partial, gh, ge = torch.randn(3, 4, 256), torch.zeros(4, 256), torch.zeros(4, 256)
    assert serves("grad_w_reduce", x.device, partial, wh, we, gh, ge) == "ascend"
    assert serves("grad_w_reduce", x.device, partial, wh, we, torch.zeros(256, 4).T, ge) == "reference"
    saved = ref.engram_gate_fwd(x, k, v, w, 1e-20, 1e-6)[1:]
    wide = gate_inputs(2, 65, 64)
    assert serves("engram_gate_fwd", x.device, *wide, 1e-20, 1e-6, True) == "reference"
    assert serves("engram_gate_bwd", x.device, wide[0], *wide, *saved, 1e-6, 4) == "reference"
    assert serves("engram_hash", x.device, *_hash_inputs(2, 9, 3, 4, seed=1)) == "ascend"
    assert serves("engram_hash", x.device, *_hash_inputs(4, 3, 5, 2048)) == "reference"
