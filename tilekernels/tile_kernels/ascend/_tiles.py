"""How the block casts cut a matrix into UB tiles (shared by the cast and the cast back)."""

UB_TILE_BYTES = 48 * 1024  # input tile budget: x, partials, q and the scales stay well inside dav-3510's UB


def tile_shape(m: int, k: int, bm: int, bk: int, in_bytes: int, per_word: int = 1) -> tuple[int, int]:
    """``(br, bc)``: whole scale blocks (whole words of ``per_word`` packed K-blocks), at most UB_TILE_BYTES of x."""
    kunit = bk * per_word
    kunit = kunit * max(1, -(-64 // kunit))  # at least 64 columns so E2M1 bytes and DMA bursts stay whole
    bc = min(-(-k // kunit) * kunit, max(kunit, (UB_TILE_BYTES // (bm * in_bytes)) // kunit * kunit))
    br = bm * max(1, min(-(-m // bm), UB_TILE_BYTES // (bm * bc * in_bytes)))
    return br, bc
