"""The call-detail chart: each dimension's score over the call as inline SVG, computed
here and drawn by the template (no JavaScript, no chart library, nothing to download)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.schemas import TimelinePoint

WIDTH, HEIGHT, PAD = 720, 220, 32
# one colour per dimension, readable on the light background and for common colour
# blindness (Okabe-Ito)
COLOURS = {
    "synthetic_voice": "#d55e00",
    "known_fraudster": "#cc79a7",
    "voice_mismatch": "#0072b2",
    "replay": "#e69f00",
    "caller_id": "#009e73",
    "dtmf_behaviour": "#56b4e9",
    "speech_activity": "#666666",
}


@dataclass(frozen=True, slots=True)
class Series:
    dimension: str
    colour: str
    points: str  # the SVG polyline's "x,y x,y …"
    last: float


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    pad: int
    series: tuple[Series, ...]
    x_ticks: tuple[tuple[float, str], ...]  # (x, label)
    y_ticks: tuple[tuple[float, str], ...]
    threshold_y: float | None


def build(timeline: dict[str, list[TimelinePoint]], threshold: float | None = None) -> Chart:
    t_max = max((p.t for points in timeline.values() for p in points), default=0.0) or 1.0
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x(t: float) -> float:
        return round(PAD + inner_w * t / t_max, 1)

    def y(score: float) -> float:
        return round(PAD + inner_h * (1.0 - score), 1)

    series = tuple(
        Series(
            dimension=dim,
            colour=COLOURS.get(dim, "#333333"),
            points=" ".join(f"{x(p.t)},{y(p.score)}" for p in sorted(points, key=lambda p: p.t)),
            last=points[-1].score,
        )
        for dim, points in sorted(timeline.items())
        if points
    )
    step = max(1, round(t_max / 6))
    x_ticks = tuple((x(t), f"{t:g} s") for t in range(0, int(t_max) + 1, step))
    y_ticks = tuple((y(v), f"{v:.2g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0))
    return Chart(
        WIDTH,
        HEIGHT,
        PAD,
        series,
        x_ticks,
        y_ticks,
        y(threshold) if threshold is not None else None,
    )
