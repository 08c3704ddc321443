"""Frame sinks for the playout clock until the detectors arrive (issue 5): one that
counts frames per leg and flag, and one that also keeps the decoded audio (tests, demo).
Both run on the playout thread; readers take a snapshot under the sink's lock."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from native.ingest import PulledFrames, frame_flag_name

_NORMAL = "normal"


class CountingSink:
    """Frames per leg and flag (``normal``, ``concealed``, ``cng``, ``paused``, ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}

    def on_frames(self, now_ns: int, legs: Sequence[str], frames: PulledFrames) -> None:
        flags = frames.infos["flag"]
        with self._lock:
            for row, leg in enumerate(legs):
                counts = self._counts.get(leg)
                if counts is None:
                    counts = self._counts[leg] = Counter()
                counts[frame_flag_name(int(flags[row]))] += 1

    def counts(self, leg: str) -> dict[str, int]:
        with self._lock:
            return dict(self._counts.get(leg, Counter()))

    @property
    def legs(self) -> list[str]:
        with self._lock:
            return list(self._counts)


@dataclass(slots=True)
class CapturedLeg:
    """NORMAL frames of one leg keyed by the RTP timestamp of their first sample."""

    by_rtp_ts: dict[int, npt.NDArray[np.int16]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def audio(self) -> tuple[int, npt.NDArray[np.int16]]:
        """(first RTP timestamp, samples) of the received audio laid out on its RTP
        timeline (8 kHz clock), zeros where nothing was received."""
        if not self.by_rtp_ts:
            return 0, np.zeros(0, np.int16)
        first = min(self.by_rtp_ts)
        last = max(self.by_rtp_ts)
        size = last - first + self.by_rtp_ts[last].size
        out = np.zeros(size, np.int16)
        for ts, pcm in self.by_rtp_ts.items():
            out[ts - first : ts - first + pcm.size] = pcm
        return first, out


class CaptureSink(CountingSink):
    """Counts, and keeps every NORMAL frame's audio per leg (bounded by ``max_frames``)."""

    def __init__(self, max_frames: int = 50 * 120) -> None:
        super().__init__()
        self._captured: dict[str, CapturedLeg] = {}
        self._max_frames = max_frames

    def on_frames(self, now_ns: int, legs: Sequence[str], frames: PulledFrames) -> None:
        super().on_frames(now_ns, legs, frames)
        infos = frames.infos
        with self._lock:
            for row, leg in enumerate(legs):
                cap = self._captured.get(leg)
                if cap is None:
                    cap = self._captured[leg] = CapturedLeg()
                flag = frame_flag_name(int(infos["flag"][row]))
                if len(cap.flags) < self._max_frames:
                    cap.flags.append(flag)
                keep = len(cap.by_rtp_ts) < self._max_frames
                if flag == _NORMAL and infos["has_rtp_ts"][row] and keep:
                    n = int(infos["samples"][row])
                    cap.by_rtp_ts[int(infos["rtp_ts"][row])] = frames.pcm[row, :n].copy()

    def captured(self, leg: str) -> CapturedLeg:
        with self._lock:
            cap = self._captured.get(leg, CapturedLeg())
            return CapturedLeg(dict(cap.by_rtp_ts), list(cap.flags))
