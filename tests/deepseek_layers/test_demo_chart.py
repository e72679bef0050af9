"""`make run`'s demo at tiny shapes: the table has the baseline and engine columns, and the charts are valid PNGs
(signature, IHDR, every chunk's CRC, IDAT inflating to height scanlines of width RGB pixels) with legends."""
import struct
import zlib

from deepseek_layers import demo


def _check_png(path: str) -> tuple[int, int]:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body, (crc,) = data[pos + 8:pos + 8 + length], struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, kind
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    assert len(set(raw[1:1 + 3 * width * height])) > 2      # bars drawn, not a blank image
    return width, height


def test_tiny_demo_prints_the_columns_and_writes_the_charts(tmp_path, capsys):
    assert demo.main(["--tiny", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    for column in ("time", "torch", "baseline", "speed-up", "throughput", "engine", "check"):
        assert column in header
    assert demo.matrix_engine() in out
    assert "MoE layer stages" in out and "DSA decode stages" in out
    for name, rows in (("ops", len(demo.TOUR)), ("stages", sum(len(s) for s in demo.STAGES.values()))):
        _, height = _check_png(str(tmp_path / f"{name}.png"))
        assert height > rows * 2
        legend = (tmp_path / f"{name}.txt").read_text()
        assert legend.count(" ms, baseline ") == rows
