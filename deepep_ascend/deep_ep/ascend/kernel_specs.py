"""deep_ep's TileLang Ascend kernels at representative shapes (EP8, hidden 7168, top-8 of 256 experts; the
token and row counts are symbolic): the specs of the backend table's Ascend column, which ``make ascend-codegen``
lowers through the ``deepjit.ascend_kernels`` entry point (the table's ``ascend_kernels``). Every one is a
vector-core (AIV) kernel; their twin checks are in twin_checks.py."""
from deepjit.tilelang_route import AscendKernelSpec

R, H, K = 8, 7168, 8


def _spec(name, build):
    return AscendKernelSpec(name, build, "vector")


def _pack_bf16():
    from . import scatter
    return scatter.build(H * 2, R)


def _unpack_bf16_aligned():
    from . import scatter
    return scatter.build(H * 2, K)


def _pack_fp8():
    from . import fp8_pack
    return fp8_pack.build(H, R, False)


def _combine_reduce_bias():
    from . import reduce
    return reduce.build(H, K, False, 1, False)


def _combine_partial():
    from . import reduce
    return reduce.build(H, K, False, 0, True)


def _ll_unpack_fp8():
    from . import scatter
    return scatter.build(H, K)


def _ll_combine():
    from . import reduce
    return reduce.build(H, K, True, 0, False)


def _gather_bf16():
    from . import gather
    return gather.build(H * 2)


def _cast_ue8m0():
    from . import fp8_pack
    return fp8_pack.build(H, 1, True)


ENGINE = (_spec("ep_pack_bf16_r8", _pack_bf16), _spec("ep_unpack_expanded_bf16_k8", _unpack_bf16_aligned),
          _spec("ep_pack_fp8_r8", _pack_fp8), _spec("ep_combine_reduce_k8_bias", _combine_reduce_bias),
          _spec("ep_combine_partial_k8", _combine_partial))
LOW_LATENCY = (_spec("ep_ll_unpack_fp8_k8", _ll_unpack_fp8), _spec("ep_ll_combine_weighted_k8", _ll_combine))
CAST = (_spec("ep_per_token_cast_fp8_ue8m0", _cast_ue8m0),)
GATHER = (_spec("ep_engram_gather_bf16", _gather_bf16),)

