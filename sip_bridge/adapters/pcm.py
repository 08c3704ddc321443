"""Raw linear PCM (L16) legs, for the adapters that carry audio as plain little-endian
samples with no header of their own: Asterisk AudioSocket, FreeSWITCH mod_audio_fork /
jambonz ``listen`` and Amazon Connect's KVS tracks.

- :func:`native_l16_rates`: which sample rates the native core decodes (and resamples)
  into an 8 kHz leg, probed once. A stream at a rate the core refuses is refused by
  the adapter with a clear error, never fed as garbage.
- :func:`l16_payload_types`: the payload-type table of such a leg (one L16LE entry per
  rate: the C decoder reads little-endian samples as they come, no swap in Python;
  plus telephone-event for digits the transport reports as text).
- :func:`split_stereo`: interleaved 2-channel L16 -> one byte string per channel.
- :class:`Pacing`: cuts a client that sends audio much faster than real time (a flood
  would otherwise overrun the jitter buffer and burn CPU for other calls).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from native.jitter import JitterBuffer, JitterConfig, PayloadType

OUT_RATE = 8000  # the detectors' rate (DESIGN §1)
TELEPHONE_EVENT_PT = 101
# One payload type per L16 rate any adapter may announce (101 stays telephone-event).
L16_PTS: dict[int, int] = {
    8000: 96,
    12000: 97,
    16000: 98,
    24000: 99,
    32000: 100,
    44100: 102,
    48000: 103,
    64000: 104,
    96000: 105,
    192000: 106,
}
_DTMF = PayloadType(TELEPHONE_EVENT_PT, "telephone-event", OUT_RATE)


def _table(rates: tuple[int, ...]) -> tuple[PayloadType, ...]:
    return (*(PayloadType(L16_PTS[r], "L16LE", r) for r in rates), _DTMF)


@functools.cache
def native_l16_rates(out_rate: int = OUT_RATE) -> tuple[int, ...]:
    """The L16 sample rates a leg decoding to ``out_rate`` accepts, all in one table
    (probed once by building a jitter buffer with that configuration)."""
    accepted: list[int] = []
    for rate in L16_PTS:
        try:
            JitterBuffer(JitterConfig(out_rate=out_rate, payload_types=_table((*accepted, rate))))
        except ValueError:
            continue
        accepted.append(rate)
    return tuple(accepted)


def l16_payload_types(rates: tuple[int, ...]) -> tuple[PayloadType, ...]:
    """The payload-type table of an L16 leg that may carry any of ``rates``."""
    return _table(rates)


def split_stereo(frame: bytes) -> tuple[bytes, bytes]:
    """Interleaved little-endian 2-channel L16 (``len(frame) % 4 == 0``) -> channel 0,
    channel 1, each still little-endian."""
    pairs = np.frombuffer(frame, "<i2").reshape(-1, 2)
    return pairs[:, 0].tobytes(), pairs[:, 1].tobytes()


@dataclass
class Pacing:
    """Audio may run at most ``slack_s`` ahead of the wall clock since its first chunk
    (a burst after a network stall stays within it; a sender faster than real time
    does not)."""

    rate: int
    slack_s: float = 1.0
    samples: int = 0
    _start_ns: int = -1

    def admit(self, samples: int, now_ns: int) -> bool:
        if self._start_ns < 0:
            self._start_ns = now_ns
        self.samples += samples
        allowed = ((now_ns - self._start_ns) / 1e9 + self.slack_s) * self.rate
        return self.samples <= allowed
