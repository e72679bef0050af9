"""Named host-kernel arguments (deepjit.descriptors): the ctypes struct read from the C++ declaration
has the compiler's layout, a kernel reads back every field as Python set it, and a name the two
sides disagree on (unknown, missing, renamed in C++) raises before any kernel runs."""
import ctypes
import re

import pytest
import torch

from deepjit import descriptors as D

from .helpers import make_runtime

HEADER = r"""
// mixed sizes so that padding matters; comments and multi-name declarations as headers have them
struct Scope { const void* cache; int32_t format, split; const int32_t *indices, *lengths; };
struct Args {
    float* out;            /* where the kernel reports */
    int8_t flag;
    int64_t q_b, q_s;
    float scale;
    Scope scope0;
    uint16_t small;
    Scope scope1;
    double weight;
};
"""
KERNEL = r"""
#include <cstddef>
#include <deepjit/host/kernel.hpp>
""" + HEADER + r"""
// out: sizeof and offsets as the compiler has them, then the values of the scalar fields
DJ_KERNEL(desc_echo, "ptr,ptr")
void desc_echo(const Args* a, int64_t* out) {
    int64_t* o = out;
    *o++ = sizeof(Args);
    *o++ = offsetof(Args, flag); *o++ = offsetof(Args, q_b); *o++ = offsetof(Args, scale);
    *o++ = offsetof(Args, scope0); *o++ = offsetof(Args, small); *o++ = offsetof(Args, scope1);
    *o++ = offsetof(Args, weight); *o++ = offsetof(Scope, indices);
    *o++ = a->flag; *o++ = a->q_b; *o++ = a->q_s; *o++ = static_cast<int64_t>(a->scale * 4);
    *o++ = a->scope0.format; *o++ = a->scope1.split; *o++ = a->small; *o++ = static_cast<int64_t>(a->weight * 8);
    *o++ = a->scope1.indices[1];
    a->out[0] = 7.0f;
}
"""


def _values(**overrides):
    scope = {"cache": None, "format": 3, "split": 1, "indices": None, "lengths": None}
    values = {"out": None, "flag": -2, "q_b": 1 << 40, "q_s": 5, "scale": 0.25, "scope0": scope,
              "small": 65535, "scope1": dict(scope, split=9), "weight": 0.5}
    values.update(overrides)
    return values


def test_fields_are_read_from_the_declaration():
    assert D.declared_fields(HEADER, "Scope") == [("cache", "ptr"), ("format", "int32_t"), ("split", "int32_t"),
                                                  ("indices", "ptr"), ("lengths", "ptr")]
    assert [f for f, _ in D.declared_fields(HEADER, "Args")] == ["out", "flag", "q_b", "q_s", "scale", "scope0",
                                                                 "small", "scope1", "weight"]


def test_the_kernel_sees_the_layout_and_the_values(tmp_path, monkeypatch):
    args_t = D.struct_type(HEADER, "Args")
    scope_t = D.struct_type(HEADER, "Scope")
    kernel = make_runtime(tmp_path, monkeypatch).compile("desc_echo", KERNEL)
    out, ids = torch.zeros(1), torch.tensor([4, 11], dtype=torch.int32)
    desc = D.pack(args_t, **_values(out=out, scope1=dict(_values()["scope1"], indices=ids)))
    report = torch.zeros(18, dtype=torch.int64)
    kernel(D.address(desc), report)
    offsets = [ctypes.sizeof(args_t)] + [getattr(args_t, f).offset for f in
                                         ("flag", "q_b", "scale", "scope0", "small", "scope1", "weight")]
    assert report[:9].tolist() == offsets + [scope_t.indices.offset]
    assert report[9:].tolist() == [-2, 1 << 40, 5, 1, 3, 9, 65535, 4, 11]
    assert out.item() == 7.0


def test_a_name_mismatch_is_caught_before_the_launch():
    args_t = D.struct_type(HEADER, "Args")
    with pytest.raises(TypeError, match=r"^Args: no field q_h in the C\+\+ struct$"):
        D.pack(args_t, **_values(q_h=1))
    values = _values()
    del values["q_s"]
    with pytest.raises(TypeError, match=r"^Args: missing q_s$"):
        D.pack(args_t, **values)
    renamed = D.struct_type(HEADER.replace("int64_t q_b, q_s;", "int64_t q_b, q_stride;"), "Args")
    with pytest.raises(TypeError, match=r"no field q_s in the C\+\+ struct; missing q_stride"):
        D.pack(renamed, **_values())
    with pytest.raises(TypeError, match=r"^Scope: missing lengths$"):
        D.pack(args_t, **_values(scope0={"cache": None, "format": 3, "split": 1, "indices": None}))


def test_values_are_checked_as_the_declared_type():
    args_t = D.struct_type(HEADER, "Args")
    with pytest.raises(ValueError, match="Args.small: expected a value that fits the declared ushort, got 65536"):
        D.pack(args_t, **_values(small=65536))
    with pytest.raises(TypeError, match="Args.q_b: expected an int, got float"):
        D.pack(args_t, **_values(q_b=1.5))
    with pytest.raises(TypeError, match="Args.out: expected a tensor, an address or None, got str"):
        D.pack(args_t, **_values(out="x"))
    with pytest.raises(Exception, match="only plain fields"):
        D.struct_type("struct Bad { int64_t dims[4]; };", "Bad")


def test_every_library_descriptor_loads():
    """Each struct the libraries' host kernels take by name lays out (no field deepjit cannot place)."""
    import deep_ep._lib
    import deep_gemm
    import flash_mla
    import tile_kernels._lib
    tk = tile_kernels._lib.LIB
    headers = [(flash_mla.LIB, "host/launch_args.hpp"), (deep_ep._lib.LIB, "host/combine_args.hpp"),
               (deep_ep._lib.LIB, "host/dispatch_args.hpp"), (deep_ep._lib.LIB, "host/ll_args.hpp"),
               (deep_gemm.LIB, "host/sf_layout_args.hpp"), (deep_gemm.LIB, "host/hc_prenorm_args.hpp"),
               (deep_gemm.LIB, "host/mqa_logits_args.hpp")]
    headers += [(tk, f"host/{name}_args.hpp") for name in ("engram", "swiglu", "router", "mhc", "mhc_post", "cast",
                                                               "layout")]
    for lib, header in headers:
        source = lib.source(header)
        names = re.findall(r"\bstruct\s+(\w+)\s*\{", source)
        assert names, header
        for name in names:
            assert ctypes.sizeof(D.struct_type(source, name)) > 0, (header, name)


def test_temporaries_passed_as_fields_live_as_long_as_the_descriptor(tmp_path, monkeypatch):
    """A field filled with a temporary (``x.contiguous()`` of a strided tensor, here also inside a nested
    field dict) is kept by the descriptor: freed and reused memory would hand the kernel other bytes."""
    import gc
    import weakref

    args_t = D.struct_type(HEADER, "Args")
    kernel = make_runtime(tmp_path, monkeypatch).compile("desc_echo", KERNEL)
    strided = torch.tensor([[4, 0], [11, 0]], dtype=torch.int32).t()[0]   # [4, 11], stride 2
    temp = strided.contiguous()
    probe = weakref.ref(temp)
    desc = D.pack(args_t, **_values(out=torch.zeros(1), scope1=dict(_values()["scope1"], indices=temp)))
    del temp
    gc.collect()
    assert probe() is not None
    torch.full((1 << 20,), 0x7F7F7F7F, dtype=torch.int32)   # would reuse the freed block if it were freed
    report = torch.zeros(18, dtype=torch.int64)
    kernel(D.address(desc), report)
    assert report[16:].tolist() == [4, 11]
    del desc
    gc.collect()
    assert probe() is None


def test_check_host_layout_compares_every_field_with_the_compiler(tmp_path):
    import deepjit
    pkg = tmp_path / "probe_pkg"
    (pkg / "host").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # #pragma pack is invisible to the declaration parser: ctypes puts `cache` at 8, the compiler at 4
    (pkg / "host" / "args.hpp").write_text("#pragma once\n#include <cstdint>\nnamespace ns {\n" + HEADER + "\n"
                                           "#pragma pack(push, 1)\nstruct Packed { int32_t n; const void* cache; };\n"
                                           "#pragma pack(pop)\n}\n")
    lib = deepjit.KernelLibrary("probe_pkg", "PROBEPKG", str(pkg / "__init__.py"), "0.1")
    checked = D.check_host_layout(lib, "host/args.hpp", "ns::Args")
    assert checked is D.struct_type(lib.source("host/args.hpp"), "Args")
    with pytest.raises(D.DeepJITError, match=r"ns::Packed\.cache is at byte 4 as compiled but at 8"):
        D.check_host_layout(lib, "host/args.hpp", "ns::Packed")


def test_struct_type_follows_the_header_text_not_a_stale_memo():
    """The memo is keyed by the header text: an equal text (another str object) gets the same type, an
    edited header (a field added) gets the new layout, never the one built for the old text."""
    first = D.struct_type(HEADER, "Scope")
    assert D.struct_type("".join(list(HEADER)), "Scope") is first
    edited = HEADER.replace("int32_t format, split;", "int32_t format, split, extra;")
    widened = D.struct_type(edited, "Scope")
    assert [f for f, _ in widened._fields_] == ["cache", "format", "split", "extra", "indices", "lengths"]
    assert [f for f, _ in first._fields_] == ["cache", "format", "split", "indices", "lengths"]
    assert D.struct_type(edited, "Args")._fields_[5][1] is widened
