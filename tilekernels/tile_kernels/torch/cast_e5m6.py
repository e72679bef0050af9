from ..reference.cast_e5m6 import cast_back_from_e5m6, cast_to_e5m6

__all__ = ["cast_to_e5m6", "cast_back_from_e5m6"]
