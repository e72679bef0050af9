"""deepjit.backends.shared_library: opened once, init run once, a missing library named in the error."""
import pytest

from deepjit.backends.shared_library import SharedLibrary
from deepjit.errors import DeepJITError, ToolchainNotFoundError


def test_opens_once_and_runs_init_once():
    calls = []
    lib = SharedLibrary("libc.so.6", "the C library", init=calls.append)
    first = lib()
    assert lib() is first and calls == [first]
    assert first.abs(-3) == 3 and lib.available()


def test_missing_library_names_itself():
    lib = SharedLibrary("libdoes_not_exist_here.so", "a test library")
    with pytest.raises(ToolchainNotFoundError, match="libdoes_not_exist_here.so .a test library"):
        lib()
    assert not lib.available()


def test_failing_init_is_not_cached():
    def init(_):
        raise DeepJITError("init failed")
    lib = SharedLibrary("libc.so.6", "the C library", init=init)
    assert not lib.available()
    with pytest.raises(DeepJITError, match="init failed"):
        lib()
