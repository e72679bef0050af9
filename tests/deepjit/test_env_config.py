"""Config validation, environment resolution (<PREFIX>_X, then DJ_X, never bare X), strict parsing,
cache-root lists, frozen-at-construction values and lazy runtime creation."""
import os
import re
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deepjit
from deepjit import Config, DiskCache, Env, LazyInit, create_lazy_jit
from deepjit.env import parse_bool, parse_int
from deepjit.errors import DeepJITError

from .helpers import ADD_SOURCE


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("TST_", "DJ_TEST_")) or name in ("DJ_JIT_DEBUG", "JIT_DEBUG", "TEST_FLAG"):
            monkeypatch.delenv(name)


# ---- Config -------------------------------------------------------------------------------------
@pytest.mark.parametrize("root, message", [("", "Python library root must not be empty"),
                                           ("relative/path", "Python library root must be absolute")])
def test_config_rejects_bad_root(root, message):
    with pytest.raises(DeepJITError, match=message):
        Config(root, "TST")


@pytest.mark.parametrize("prefix, message", [("", "must not be empty"), ("DJ", "reserved for global environment")])
def test_config_rejects_bad_prefix(prefix, message):
    with pytest.raises(DeepJITError, match=message):
        Config("/lib", prefix)


@pytest.mark.parametrize("include, message", [("", "JIT include directory must not be empty"),
                                              ("inc", "JIT include directory must be absolute")])
def test_config_rejects_bad_include_dir(include, message):
    with pytest.raises(DeepJITError, match=message):
        Config("/lib", "TST", include_dirs=[include])


def test_config_normalises_and_serialises():
    c = Config("/lib/./pkg/../pkg2/", "TST", extra_signature="sig\0x", include_dirs=["/inc//a/"],
               include_prefixes=["pkg2/"])
    assert c.python_library_root == "/lib/pkg2"
    assert c.include_dirs == ("/inc/a",)
    assert c.get_python_path("hooks/../hook.py") == "/lib/pkg2/hook.py"
    assert c.to_json() == {"python_library_root": "/lib/pkg2", "extra_signature": "sig\0x",
                           "include_dirs": ["/inc/a"], "include_prefixes": ["pkg2/"]}
    with pytest.raises(AttributeError):
        c.env_prefix = "X"


# ---- Env --------------------------------------------------------------------------------------
def test_prefix_beats_global_and_bare_name_is_ignored(monkeypatch):
    env = Env("TST")
    monkeypatch.setenv("JIT_DEBUG", "1")
    assert env.get_bool("JIT_DEBUG") is False            # bare name never read
    monkeypatch.setenv("DJ_JIT_DEBUG", "1")
    assert env.get_bool("JIT_DEBUG") is True             # global fallback
    monkeypatch.setenv("TST_JIT_DEBUG", "0")
    assert env.get_bool("JIT_DEBUG") is False            # library prefix wins
    assert Env("OTHER").get_bool("JIT_DEBUG") is True    # another library inherits DJ


def test_present_but_empty_prefixed_variable_shadows_global(monkeypatch):
    monkeypatch.setenv("DJ_JIT_CACHE_DIR", "/global")
    monkeypatch.setenv("TST_JIT_CACHE_DIR", "")
    assert Env("TST").get_str("JIT_CACHE_DIR") == ""
    with pytest.raises(DeepJITError, match="invalid value for TST_X: "):
        monkeypatch.setenv("TST_X", "")
        Env("TST").get_int("X")


def test_launch_timeout_precedence_library_over_global(monkeypatch):
    monkeypatch.setenv("DJ_JIT_LAUNCH_TIMEOUT", "11")
    assert Env("TST").get_int("JIT_LAUNCH_TIMEOUT", 300) == 11
    monkeypatch.setenv("TST_JIT_LAUNCH_TIMEOUT", "7")
    assert Env("TST").get_int("JIT_LAUNCH_TIMEOUT", 300) == 7
    assert Env("TST").get_int("UNSET_THING", 300) == 300


@pytest.mark.parametrize("raw, value", [("true", True), ("YeS", True), ("FALSE", False), ("no", False), ("0", False),
                                        ("1", True), ("-3", True), ("00", False)])
def test_bool_parsing(raw, value):
    assert parse_bool("TST_B", raw) is value


@pytest.mark.parametrize("raw", ["", "on", "off", "1.0", " 1", "1 ", "+1", "y", "tru"])
def test_bool_parsing_rejects(raw):
    with pytest.raises(DeepJITError, match=re.escape(f"invalid value for TST_B: {raw}")):
        parse_bool("TST_B", raw)


@pytest.mark.parametrize("raw", ["", "+5", " 5", "5 ", "5x", "0x10", "1e3", "9223372036854775808", "-9223372036854775809",
                                 "٣"])
def test_int_parsing_rejects(raw):
    with pytest.raises(DeepJITError, match="invalid value for TST_I"):
        parse_int("TST_I", raw)


def test_unsigned_rejects_sign_and_accepts_full_range():
    with pytest.raises(DeepJITError):
        parse_int("TST_U", "-1", unsigned=True)
    assert parse_int("TST_U", str(2**64 - 1), unsigned=True) == 2**64 - 1
    assert parse_int("TST_I", "-9223372036854775808") == -(2**63)


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="0123456789+- x", max_size=22))
def test_int_parsing_matches_from_chars_rule(raw):
    # from_chars accepts an optional '-' then decimal digits, consuming the whole string, in range.
    body = raw[1:] if raw.startswith("-") else raw
    ok = body.isdigit() and body.isascii() and -(2**63) <= int(raw) < 2**63
    if ok:
        assert parse_int("TST_I", raw) == int(raw)
    else:
        with pytest.raises(DeepJITError):
            parse_int("TST_I", raw)


# ---- cache roots ------------------------------------------------------------------------------
def test_cache_dir_list_and_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("TST_JIT_CACHE_DIR", f"{tmp_path}/a:{tmp_path}/b")
    assert DiskCache.from_env(Env("TST")).roots == [f"{tmp_path}/a", f"{tmp_path}/b"]
    monkeypatch.setenv("TST_JIT_CACHE_DIR", f"{tmp_path}/a::{tmp_path}/b")
    with pytest.raises(DeepJITError, match="disk cache path list contains an empty path"):
        DiskCache.from_env(Env("TST"))
    monkeypatch.delenv("TST_JIT_CACHE_DIR")
    monkeypatch.delenv("DJ_JIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert DiskCache.from_env(Env("TST")).roots == [f"{tmp_path}/.dj"]
    monkeypatch.setenv("HOME", "")
    with pytest.raises(DeepJITError, match="HOME is empty"):
        DiskCache.from_env(Env("TST"))


def test_cache_roots_are_frozen_per_runtime(monkeypatch, tmp_path):
    config = Config(str(tmp_path), "TST")
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "one"))
    first = deepjit.Runtime(config, "host")
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "two"))
    second = deepjit.Runtime(config, "host")
    assert first.disk_cache.roots == [str(tmp_path / "one")]
    assert second.disk_cache.roots == [str(tmp_path / "two")]


# ---- lazy creation ------------------------------------------------------------------------------
def test_lazy_runtime_touches_nothing_until_first_use(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(cache))
    monkeypatch.setenv("TST_JIT_CXX", str(tmp_path / "no-such-compiler"))
    lazy = create_lazy_jit(Config(str(tmp_path), "TST"), "host")
    assert not lazy.initialized and not cache.exists()
    with pytest.raises(deepjit.ToolchainNotFoundError, match="no-such-compiler.*TST_JIT_CXX"):
        lazy.get()
    assert not lazy.initialized
    monkeypatch.delenv("TST_JIT_CXX")
    assert isinstance(lazy.get(), deepjit.Runtime) and lazy.get() is lazy.get()


def test_lazy_holder_errors():
    with pytest.raises(DeepJITError, match="lazy object must be initialized before use"):
        LazyInit(None).get()
    with pytest.raises(DeepJITError, match="lazy factory must not return nullptr"):
        LazyInit(lambda: None).get()
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("first try fails")
        return "value"

    holder = LazyInit(flaky)
    with pytest.raises(OSError):
        holder.get()
    assert holder.get() == "value" and len(calls) == 2


# ---- Python API of a library's runtime ---------------------------------------------------------
def test_register_python_api_shares_one_runtime_and_follows_reassignment(monkeypatch, tmp_path):
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "cache"))
    module = types.ModuleType("some_library")
    lazy = create_lazy_jit(Config(str(tmp_path), "TST"), "host")
    deepjit.register_python_api(module, lazy)
    assert module.Runtime is deepjit.Runtime and not lazy.initialized
    first = module.get_jit()
    assert isinstance(first, deepjit.Runtime) and module.get_jit() is first and lazy.initialized
    lazy.reset(lambda: deepjit.Runtime(Config(str(tmp_path), "TST"), "host"))
    second = module.get_jit()
    assert second is not first and module.get_jit() is second
    assert first.compile("add_i64", ADD_SOURCE) is not None  # the earlier runtime stays usable
    with pytest.raises(TypeError, match=re.escape("lazy_jit: expected a deepjit.LazyInit (see create_lazy_jit), got")):
        deepjit.register_python_api(module, first)


def test_registering_touches_nothing_and_get_jit_raises_the_real_error(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(cache))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "no-such-toolkit"))  # an invalid toolkit
    module = types.ModuleType("npu_library")
    deepjit.register_python_api(module, create_lazy_jit(Config(str(tmp_path), "TST"), "ascend"))
    assert not cache.exists()
    with pytest.raises(deepjit.ToolchainNotFoundError, match="Ascend toolkit home was not found"):
        module.get_jit()
    assert not cache.exists()
