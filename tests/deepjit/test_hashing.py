"""The cache-key hash: two-lane FNV-1a with length framing and a SplitMix64 finaliser, and the
order of the key components."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepjit import FNV1a, hash_hex

from .helpers import ADD_SOURCE, make_runtime, reference_hex


def test_empty_input_by_hand():
    # update(b"") feeds eight zero bytes: lane ^ 0 == lane, so each lane is init * mult^8 (mod 2^64).
    m = (1 << 64) - 1
    lane0 = 0xC6A4A7935BD1E995 * pow(0x100000001B3, 8, 1 << 64) & m
    lane1 = 0xFF51AFD7ED558CCD * pow(0x9E3779B97F4A7C15, 8, 1 << 64) & m

    def finalise(v):
        v ^= v >> 30
        v = v * 0xBF58476D1CE4E5B9 & m
        v ^= v >> 27
        v = v * 0x94D049BB133111EB & m
        return v ^ (v >> 31)

    assert FNV1a().update(b"").hexdigest() == f"{finalise(lane0):016x}{finalise(lane1):016x}"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=4))
def test_matches_independent_reference(components):
    assert hash_hex(*components) == reference_hex(*components)


def test_digest_format_and_str_is_utf8():
    digest = hash_hex("héllo")
    assert len(digest) == 32 and digest == digest.lower() and int(digest, 16) >= 0
    assert digest == hash_hex("héllo".encode())


def test_length_framing_nul_bytes_and_positional_empties():
    assert hash_hex("ab", "c") != hash_hex("a", "bc")
    assert hash_hex("", "x") != hash_hex("x", "") != hash_hex("x")
    assert hash_hex(b"a\0") != hash_hex(b"a") != hash_hex(b"\0a")


def test_copy_forks_the_state():
    base = FNV1a().update("prefix")
    fork = base.copy()
    fork.update("more")
    assert base.hexdigest() == hash_hex("prefix")
    assert fork.hexdigest() == hash_hex("prefix", "more")


def test_lanes_and_bits_look_independent():
    digests = [int(hash_hex(i.to_bytes(4, "little")), 16) for i in range(2000)]
    assert len(set(digests)) == len(digests)
    flips = [bin(int(hash_hex(b"key%d" % i), 16) ^ int(hash_hex(b"key%d" % (i ^ 1)), 16)).count("1")
             for i in range(200)]
    assert 54 < np.mean(flips) < 74  # avalanche: about half of 128 bits flip
    bits = np.array([[d >> b & 1 for b in range(128)] for d in digests])
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.06)


def test_key_components_in_order(tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch, extra_signature="sig-1")
    options = rt.default_compiler_options
    flags = " ".join(options.get_flags() + options.get_link_flags())
    parser_hash = rt.parser.parse_into_hash(ADD_SOURCE)
    expected = hash_hex("sig-1", rt.backend.compiler_hash(), flags, "", parser_hash)
    assert rt.cache_key(ADD_SOURCE) == expected
    # swapping any two components gives another key
    assert rt.cache_key(ADD_SOURCE) != hash_hex(rt.backend.compiler_hash(), "sig-1", flags, "", parser_hash)


@pytest.mark.parametrize("signature", ["sig-2", "sig-1\0", b"sig-1\0x"])
def test_extra_signature_is_keyed(tmp_path, monkeypatch, signature):
    a = make_runtime(tmp_path, monkeypatch, extra_signature="sig-1").cache_key(ADD_SOURCE)
    b = make_runtime(tmp_path, monkeypatch, extra_signature=signature).cache_key(ADD_SOURCE)
    assert a != b
