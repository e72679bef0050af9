"""Registering a library's public ops as ``torch.ops.<namespace>.*`` (``torch.library``), so ``torch.compile``
traces models calling them. Explicit schemas with a Meta kernel each: a few milliseconds per package at
import, where ``register_fake`` would cost a quarter second."""
from __future__ import annotations

import contextlib
import functools

import torch


class OpLibrary:
    """A ``torch.library`` fragment: ``op(schema, impl, meta)`` defines one op, its eager kernel (any
    device: the impl dispatches itself) and its Meta kernel (shapes only)."""

    def __init__(self, namespace: str):
        self.lib = torch.library.Library(namespace, "FRAGMENT")

    def op(self, schema: str, impl, meta) -> None:
        name = schema.split("(", 1)[0]
        self.lib.define(schema)
        self.lib.impl(name, impl, "CompositeExplicitAutograd")
        self.lib.impl(name, meta, "Meta")


def returns_nothing(*args, **kwargs) -> None:
    """The Meta kernel of an op that only writes its ``Tensor(a!)`` arguments."""
    return None


def traced_as(fn, call_op):
    """``fn`` as a public function that ``torch.compile(fullgraph=True)`` traces: eager calls run ``fn``;
    while Dynamo traces, ``call_op`` (same arguments) calls the ``torch.ops`` form instead, so the graph
    holds one opaque op whose eager kernel runs ``fn`` -- every argument check included, on real values --
    and whose Meta kernel gives the shapes. Argument checks that read data pointers or values need no
    tracing this way."""
    @functools.wraps(fn)
    def public(*args, **kwargs):
        if torch.compiler.is_compiling():
            return call_op(*args, **kwargs)
        return fn(*args, **kwargs)
    public.eager = fn
    return public


def route_everywhere(package: str, fn, call_op, keep: str):
    """``traced_as(fn, call_op)`` bound in place of ``fn`` under every name a loaded module of ``package``
    gives it (the defining module and each re-export), so every public spelling traces; the module ``keep``
    (the one registering the ops, whose kernels call ``fn`` itself) keeps ``fn``. Only modules loaded by
    then are rebound: call it once the package has imported every module that re-exports ``fn``."""
    import sys
    public = traced_as(fn, call_op)
    for name, module in list(sys.modules.items()):
        if module is None or name == keep or not (name == package or name.startswith(package + ".")):
            continue
        for attr, value in list(vars(module).items()):
            if value is fn:
                setattr(module, attr, public)
    return public


@contextlib.contextmanager
def outside_fake_mode():
    """Real CPU work inside a Meta kernel: outside the fake-tensor mode tracing the call, and outside its
    redirection of every op to the Meta kernels."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    meta_tls = torch._C._meta_in_tls_dispatch_include()
    with unset_fake_temporarily():
        torch._C._set_meta_in_tls_dispatch_include(False)
        try:
            yield
        finally:
            torch._C._set_meta_in_tls_dispatch_include(meta_tls)


def meta_from_stand_ins(fn, *args):
    """Meta outputs shaped and strided as ``fn``'s outputs when run on stand-ins: ones-valued CPU tensors of
    the inputs' shapes and dtypes (ones are values every layout and cast accepts: a power-of-two scale, a
    valid UE8M0 exponent, an in-range index). For ops whose output layout depends on flags. Static shapes
    only: a size traced as a symbol has no stand-in."""
    with outside_fake_mode():
        outs = fn(*(torch.ones(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a for a in args))
    single = isinstance(outs, torch.Tensor)
    metas = tuple(torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device="meta")
                  for o in ((outs,) if single else outs))
    return metas[0] if single else metas
