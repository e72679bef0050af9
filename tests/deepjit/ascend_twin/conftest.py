"""Shared fixtures of the twin tests: the run_on_twin entry point and a Runtime on the twin for
hand-written AscendC sources."""
import pytest

pytest.importorskip("tilelang", reason="tilelang is not installed")


@pytest.fixture(scope="session")
def run_on_twin():
    from deepjit.tilelang_route import run_on_twin
    return run_on_twin


@pytest.fixture(scope="session")
def twin_runtime():
    """The twin toolchain as a deepjit Runtime (shared JIT cache: hand-written sources compile once)."""
    import deepjit
    from deepjit.tilelang_route import route_config
    return deepjit.Runtime(route_config(), "ascend_twin")


def launch_source(runtime, name: str, source: str, *args, num_blocks: int = 1):
    from deepjit.backends.ascend_twin import AscendLaunchOptions
    kernel = runtime.compile(name, source)
    return kernel.launch(AscendLaunchOptions(num_blocks=num_blocks, num_ubuf_bytes=0, num_launch_timeout_secs=0), *args)
