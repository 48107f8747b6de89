"""Each theme's 8 context colours stay told apart by people with the common colour blindnesses, as the Okabe-Ito
hues they came from were. 4377fa1 darkened the light theme's orange, sky blue and yellow to read 3:1 on white, and
the three fell together: orange #B87A00 and vermilion #D55E00 read alike to a deuteranope (CIE76 difference 1.2),
orange and the darkened yellow #948300 alike to a protanope (0.6), so `slot 4` and `slot 7`'s curves were one
line to them. Pure colour arithmetic: sRGB, the Machado, Oliveira & Fernandes (2009) simulation at full severity,
CIELAB distance."""

from __future__ import annotations

import itertools
import math

import pytest
from strata.monitor.widgets.theme import DARK, LIGHT

# Okabe-Ito's own hues are 17.0 apart at their closest (bluish green and reddish purple, for a deuteranope)
LEAST = 15.0

SIMULATIONS = {
    "normal vision": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
}


def linear_rgb(hex_colour: str) -> tuple[float, ...]:
    def one(x: float) -> float:
        return x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4

    return tuple(one(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5))


def lab(rgb: tuple[float, ...]) -> tuple[float, float, float]:
    to_xyz = ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505))
    white = (0.95047, 1.0, 1.08883)
    x, y, z = (sum(m * c for m, c in zip(row, rgb, strict=True)) / w for row, w in zip(to_xyz, white, strict=True))

    def f(t: float) -> float:
        return math.copysign(abs(t) ** (1 / 3), t) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def seen(hex_colour: str, vision: str) -> tuple[float, float, float]:
    rgb = linear_rgb(hex_colour)
    simulated = tuple(min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb, strict=True)))) for row in SIMULATIONS[vision])
    return lab(simulated)


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=["light", "dark"])
def test_every_two_context_colours_differ_for_colour_blind_eyes(theme):
    alike = []
    for vision in SIMULATIONS:
        for a, b in itertools.combinations(theme.series, 2):
            difference = math.dist(seen(a, vision), seen(b, vision))
            if difference < LEAST:
                alike.append((vision, a, b, round(difference, 1)))
    assert not alike, alike


def test_the_measure_passes_okabe_ito_itself():
    """The bound is one the original colour-blind-safe palette meets (else the test would ask the impossible)."""
    okabe_ito = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
    closest = min(math.dist(seen(a, v), seen(b, v)) for v in SIMULATIONS for a, b in itertools.combinations(okabe_ito, 2))
    assert LEAST <= closest < 17.1
