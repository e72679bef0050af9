from ..reference.cast import cast, cast_back, transform_sf

__all__ = ["transform_sf", "cast_back", "cast"]
