"""flash_mla's Ascend 950 (dav-3510) kernels: sparse MLA decode and prefill, and convert_kv_layout.

Hand-written AscendC against the C API (``c_api/asc_simd.h``: its register API, SIMD), not TileLang-Ascend:
the op is one mixed cube + vector kernel whose vector side gathers tokens record by record through
``indices`` (data and scales of a token in one burst, or two from a block-split block),
dequantises the V3.2 / MODEL1 / V4.1 FP8 / FP4 records in the Unified Buffer and hands them to the
cube's L1 in NZ order (d_qk 512 or 576, one build each), with explicit cross-core flags;
deep_gemm's hand-written cube kernels (``deep_gemm/ascend/cube_gemm.h``) already give the pattern
for the cube pipeline and FixPipe, and the same source compiles for the NPU (bisheng) and for
deepjit's Ascend CPU twin, where the tests run it.

- ``sparse_mla.asc`` (``fmla_sparse_mla``) with ``sparse_mla_vec.h``: the kernel, serving both ops.
- ``online_softmax.h``: the vector cores' online-softmax step and final normalisation, shared by the sparse
  and dense kernels.
- ``kv_relayout.asc`` (``fmla_kv_relayout``) with ``kv_relayout.py``: ``convert_kv_layout`` on the
  vector cores (MTE only: strided bursts between the two V4.1 placements, two UB buffers).
- ``kernel_args.h``: one named argument struct per kernel.
- ``sparse_attn.py``: ``sparse_decode`` / ``sparse_prefill``, taking the validated arguments the
  backend table passes (as the reference and host functions), and the ``*_accepts`` predicates
  naming the forms the kernel covers (everything else keeps the reference path).
- ``dense_attn.asc`` (``fmla_dense_attn``) with ``dense_attn_vec.h``, launched by ``dense_attn.py``: the
  dense decode over a paged BF16/FP16 cache and the varlen attention forward, one kernel (GQA/MQA query
  rows packed into the cube's M, per-row causal key limits; upstream's Ascend port has neither op).
- ``twin_checks.py``: the ``make ascend-check`` cases (the kernel on the twin vs the reference, with the
  roofline estimate from the twin's counters) and published shapes.

Pipelining (twin timeline, an estimate): no PIPE_ALL barrier inside a block's stream of steps (its work
items run back to back); the vector cores push step t + 2's K and load step t + 3's records before the
softmax of step t + 1 and compute an item's outputs behind the next softmax, in two row halves; L0A / L0B
are a ring of four slots (MTE1 up to three mmads ahead), and each L0C region (O by column halves) has its
own FixPipe event. O
([kHg, 512] FP32) stays in L0C while the steps' softmax factors are 1 (the vector cores' per-step
decision goes through the block's SSBuffer) and drains to UB once an item and once a moved reference
max, as TileLang's FlashMLA port for the 950 does. At the published prefill shape the kernel is then
cube-bound on the timeline (see deepjit/README.md's validation table).

The vector side is register (SIMD) code throughout: the FP8 / FP4 dequantisation, the softmax (one register a
row), the fold and the outputs.
"""
