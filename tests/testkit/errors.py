"""Checks of the suite's argument errors: one exact exception type and message."""
import pytest


def refused(exc: type[Exception], message: str, call, *args, **kwargs) -> None:
    """``call(*args, **kwargs)`` raises exactly ``exc`` (not a subclass) with exactly ``message``."""
    with pytest.raises(exc) as info:
        call(*args, **kwargs)
    assert type(info.value) is exc and str(info.value) == message, repr(info.value)
