"""Registering a library's public ops as ``torch.ops.<namespace>.*`` (``torch.library``), so ``torch.compile``
traces models calling them. Explicit schemas with a Meta kernel each: a few milliseconds per package at
import, where ``register_fake`` would cost a quarter second."""
from __future__ import annotations

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
