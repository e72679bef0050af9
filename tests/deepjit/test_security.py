"""Loading a cached shared object runs its code: cache paths other users can write are refused
unless the user opts in; compiler commands never go through a shell."""
import os

import pytest
import torch

from deepjit.errors import CacheSecurityError

from .helpers import ADD_SOURCE, make_runtime


def run_add(rt):
    out = torch.zeros(1, dtype=torch.int64)
    rt.compile("add_i64", ADD_SOURCE)(out, 20, 22)
    return out.item()


@pytest.mark.parametrize("target", ["root", "cache", "entry", "kernel.so"])
def test_group_or_world_writable_paths_are_refused(tmp_path, monkeypatch, target):
    path = make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    root = tmp_path / "cache"
    victim = {"root": root, "cache": root / "cache", "entry": path, "kernel.so": os.path.join(path, "kernel.so")}[target]
    os.chmod(victim, os.stat(victim).st_mode | 0o002)
    with pytest.raises(CacheSecurityError, match=f"refusing JIT cache path {victim}: writable by group or others.*"
                                                 r"TST_JIT_TRUST_SHARED_CACHE=1"):
        run_add(make_runtime(tmp_path, monkeypatch))
    monkeypatch.setenv("TST_JIT_TRUST_SHARED_CACHE", "1")  # a deliberately shared cache
    assert run_add(make_runtime(tmp_path, monkeypatch)) == 42


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_entry_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    path = make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    os.chown(os.path.join(path, "kernel.so"), 4242, -1)
    with pytest.raises(CacheSecurityError, match="owned by uid 4242"):
        run_add(make_runtime(tmp_path, monkeypatch))


def test_writable_primary_root_is_refused_before_building(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(CacheSecurityError):
        make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    assert os.listdir(root) == []


def test_published_entries_are_owner_writable_only_whatever_the_umask(tmp_path, monkeypatch):
    old = os.umask(0o002)
    try:
        path = make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    finally:
        os.umask(old)
    for p in [tmp_path / "cache", tmp_path / "cache" / "cache", path, *[os.path.join(path, n) for n in os.listdir(path)]]:
        assert os.stat(p).st_mode & 0o022 == 0, p
    assert run_add(make_runtime(tmp_path, monkeypatch)) == 42


def test_spaces_and_shell_metacharacters_are_plain_arguments(tmp_path, monkeypatch):
    odd = tmp_path / "a dir; touch PWNED $(touch PWNED2) `touch PWNED3` 'q\""
    odd.mkdir()
    monkeypatch.chdir(tmp_path)
    from deepjit.backends.host import HostCompilerOptions
    source = ADD_SOURCE.replace("out[0] = a + b;", "out[0] = a + b + (EXTRA);")
    rt = make_runtime(odd, monkeypatch)
    kernel = rt.compile("add_i64", source, HostCompilerOptions(extra_cxx_flags=["-DEXTRA=(1 + 2) * 0"]))
    out = torch.zeros(1, dtype=torch.int64)
    kernel(out, 40, 2)
    assert out.item() == 42
    assert kernel.path.startswith(str(odd))
    assert not any(p.name.startswith("PWNED") for p in tmp_path.rglob("*"))


def test_root_in_a_world_writable_parent_without_sticky_bit_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)  # anyone could rename the root away and put their own in its place
    cache = parent / "cache"
    with pytest.raises(CacheSecurityError, match=f"ancestor {parent} is writable by everyone and not sticky"):
        make_runtime(tmp_path, monkeypatch, cache=str(cache)).compile_without_load("add_i64", ADD_SOURCE)
    assert not cache.exists()
    os.chmod(parent, 0o1777)  # sticky, like /tmp: only the owner may rename or delete the root
    assert run_add(make_runtime(tmp_path, monkeypatch, cache=str(cache))) == 42
