"""One ``backend`` fixture per library: the same public-contract test runs on the reference, the host
kernels and the Ascend kernels (on deepjit's Ascend twin, CPU tensors).

Under ``"ascend"`` the library's backend table is watched: the first call of the test that the table
would send anywhere but the Ascend kernel (an op with no Ascend column, or a form its ``accepts``
declines) skips the test with the op's name -- before that call runs, so a skipped case costs nothing
and the reference is never counted twice as a pass. Each served call is recorded in ``served``; a case
that passes without any (a check that calls no op) is reported as skipped (tests/conftest.py)."""
from __future__ import annotations

import pytest

from deepjit.backend_table import BackendUnavailableError

NAMES = ("reference", "host", "ascend")


class Backend(str):
    """The backend's name (tests compare it with ``==``) and, under ``"ascend"``, the table calls served."""

    served: list[str]


def make_backend_fixture(prefix: str, table, names: list[str]):
    """A parametrised ``backend`` fixture over ``names`` for the library whose backend table is ``table``
    and whose environment prefix is ``prefix`` (``<prefix>_BACKEND``)."""

    @pytest.fixture(params=names)
    def backend(request, monkeypatch):
        name = Backend(request.param)
        name.served = []
        monkeypatch.setenv(f"{prefix}_BACKEND", request.param)
        if request.param == "ascend":
            select = table.select

            def ascend_only(op, device, *args, **kwargs):
                try:
                    chosen, fn = select(op, device, *args, **kwargs)
                except BackendUnavailableError:
                    pytest.skip(f"{op}: no Ascend kernel")
                if chosen != "ascend":
                    pytest.skip(f"{op}: this form is served by the {chosen} on Ascend")
                name.served.append(op)
                return chosen, fn

            monkeypatch.setattr(table, "select", ascend_only)
        return name

    return backend


def deselect_unlisted(config, items) -> None:
    """``@pytest.mark.backends("reference", "host", why=...)`` keeps a test off the other backends of its
    ``backend`` fixture: those cases are deselected at collection (reported as deselected, never as
    passed or skipped). ``why`` is required: for example a shape too large for the twin, whose Ascend
    kernel a smaller case of the same file covers."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("backends")
        param = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        if marker is not None:
            if not marker.kwargs.get("why"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.backends needs why=...")
            unknown = set(marker.args) - set(NAMES)
            if unknown or not marker.args:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.backends takes some of {NAMES}, got "
                                        f"{marker.args}")
            if param is None:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.backends on a test without the backend fixture")
        (dropped if marker is not None and param not in marker.args else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def unserved_ascend(item) -> str | None:
    """Why a passed test counts as skipped: it ran as the ``ascend`` case of a backend fixture and no call
    of it reached an Ascend kernel (the fixture's ``served`` stayed empty); None otherwise."""
    backend = getattr(item, "funcargs", {}).get("backend")
    if isinstance(backend, Backend) and backend == "ascend" and not backend.served:
        return "no call of this case reached an Ascend kernel (a reference-only or argument check)"
    return None
