"""Draws Strata's icon (three stacked layers on a rounded square) and writes `strata.png` (256 px) and
`strata.ico` (16-256 px, PNG entries) beside this file. Pure Python (zlib + struct), no image library.

Run: python resources/make_icons.py   (the files are committed; rerun only to change the drawing)
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
BACKGROUND = ((0x1d, 0x3b, 0x6e), (0x12, 0x24, 0x45))       # top, bottom of the rounded square
LAYERS = (  # (top y, bottom y, colour) in units of the icon's side, top layer first
    (0.22, 0.36, (0xf2, 0xb1, 0x34)),
    (0.43, 0.57, (0x3f, 0xc1, 0xa6)),
    (0.64, 0.78, (0x6c, 0xa8, 0xf0)),
)


def _inside_round_rect(x: float, y: float, x0: float, y0: float, x1: float, y1: float, r: float) -> bool:
    cx = min(max(x, x0 + r), x1 - r)
    cy = min(max(y, y0 + r), y1 - r)
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def _pixel(u: float, v: float) -> tuple[int, int, int, int]:
    """Colour at (u, v) in [0, 1]^2."""
    if not _inside_round_rect(u, v, 0.03, 0.03, 0.97, 0.97, 0.2):
        return (0, 0, 0, 0)
    for y0, y1, color in LAYERS:
        slant = (u - 0.5) * 0.06          # a slight tilt, like rock strata
        if _inside_round_rect(u, v - slant, 0.17, y0, 0.83, y1, 0.05):
            return (*color, 255)
    top, bottom = BACKGROUND
    return (*(int(a + (b - a) * v) for a, b in zip(top, bottom, strict=True)), 255)


def render(size: int, samples: int = 4) -> bytes:
    """RGBA rows, `size` x `size`, antialiased by `samples`^2 supersampling."""
    rows = bytearray()
    n = samples * samples
    for j in range(size):
        rows.append(0)                    # PNG filter type 0 for this row
        for i in range(size):
            acc = [0, 0, 0, 0]
            for sj in range(samples):
                for si in range(samples):
                    r, g, b, a = _pixel((i + (si + 0.5) / samples) / size, (j + (sj + 0.5) / samples) / size)
                    acc[0] += r * a
                    acc[1] += g * a
                    acc[2] += b * a
                    acc[3] += a
            alpha = acc[3] / n
            rows.extend((int(acc[0] / acc[3]) if acc[3] else 0, int(acc[1] / acc[3]) if acc[3] else 0,
                         int(acc[2] / acc[3]) if acc[3] else 0, int(round(alpha))))
    return bytes(rows)


def png(size: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)   # 8-bit RGBA
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(render(size), 9))
            + chunk(b"IEND", b""))


def ico(images: dict[int, bytes]) -> bytes:
    """An .ico whose entries are PNG images (Windows Vista and later read them)."""
    out = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    blobs = []
    for size, data in sorted(images.items()):
        side = 0 if size >= 256 else size
        out += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
        blobs.append(data)
    return out + b"".join(blobs)


def main() -> int:
    images = {s: png(s) for s in ICO_SIZES}
    (HERE / "strata.png").write_bytes(images[256])
    (HERE / "strata.ico").write_bytes(ico(images))
    print(f"wrote {HERE / 'strata.png'} and {HERE / 'strata.ico'} ({', '.join(map(str, ICO_SIZES))} px)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
