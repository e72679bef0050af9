"""A dependency-free PNG bar chart (matplotlib is not installed): horizontal bar pairs, ours and the torch
baseline, one pair per row, drawn as RGB pixels and written with zlib + struct. The labels go into a text
legend next to the image (no font rendering here); rows are in the legend's order, top to bottom."""
from __future__ import annotations

import struct
import zlib

OURS, BASELINE, BACKGROUND, AXIS = (31, 119, 180), (255, 127, 14), (255, 255, 255), (60, 60, 60)
WIDTH, BAR, GAP, MARGIN = 640, 10, 8, 12


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(pixels: list[bytearray], width: int) -> bytes:
    """8-bit RGB rows (``width * 3`` bytes each) as a PNG file."""
    raw = b"".join(b"\x00" + bytes(row) for row in pixels)          # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", width, len(pixels), 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")


def bar_chart(rows: list[tuple[str, float, float | None]], title: str) -> tuple[bytes, str]:
    """``rows``: (label, our seconds, baseline seconds or None). Bars on one linear scale (the longest spans the
    plot). Returns the PNG bytes and the legend text."""
    longest = max([s for _, ours, base in rows for s in (ours, base) if s] or [1.0])
    height = MARGIN * 2 + len(rows) * (2 * BAR + GAP)
    pixels = [bytearray(BACKGROUND * WIDTH) for _ in range(height)]
    plot = WIDTH - 2 * MARGIN
    for y in range(MARGIN // 2, height - MARGIN // 2):                 # the zero axis
        pixels[y][3 * (MARGIN - 1):3 * MARGIN] = bytes(AXIS)
    for i, (_, ours, base) in enumerate(rows):
        top = MARGIN + i * (2 * BAR + GAP)
        for offset, seconds, colour in ((0, ours, OURS), (BAR, base, BASELINE)):
            length = 0 if not seconds else max(1, round(plot * seconds / longest))
            for y in range(top + offset, top + offset + BAR - 1):
                pixels[y][3 * MARGIN:3 * (MARGIN + length)] = bytes(colour) * length
    legend = [title, f"blue: ours, orange: torch baseline; bar length linear in time, longest = {longest * 1e3:.3f} ms",
              "rows, top to bottom:"]
    for label, ours, base in rows:
        ratio = f"{base / ours:.2f}x" if base and ours else "-"
        legend.append(f"  {label}: ours {ours * 1e3:.3f} ms, baseline "
                      f"{'-' if base is None else f'{base * 1e3:.3f} ms'}, speed-up {ratio}")
    return encode_png(pixels, WIDTH), "\n".join(legend) + "\n"
