"""baresip (Debian baresip-core) as a real caller: it dials the bridge and plays a WAV
file of real speech through its aufile module (headless: no audio device, a temporary
config directory). The audio the jitter buffer decodes must match the file: correlation
>= 0.9 after alignment, over at least 90 % of it, not just "frames arrived".

``net_interface 127.0.0.1`` matters: without it baresip puts the host's primary address
in its SDP, sends from 127.0.0.1, and the bridge's source lock rightly drops the RTP."""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from bridge_runner import free_udp_port, load_speech, running_bridge, wait_for

from detectors.bus.redis_server import free_udp_tcp_port


def _aligned_correlation(
    source: npt.NDArray[np.int16], received: npt.NDArray[np.int16]
) -> tuple[float, int, int]:
    """(correlation at the best lag, that lag, samples compared)."""
    s, r = source.astype(np.float64), received.astype(np.float64)
    n = 1 << int(np.ceil(np.log2(s.size + r.size)))
    xc = np.fft.irfft(np.fft.rfft(s, n) * np.conj(np.fft.rfft(r, n)), n)
    lag = int(np.argmax(xc))
    lag = lag - n if lag > n // 2 else lag  # received[i] ~ source[i + lag]
    a, b = (s[lag:], r) if lag >= 0 else (s, r[-lag:])
    m = min(a.size, b.size)
    return float(np.corrcoef(a[:m], b[:m])[0, 1]), lag, m


def test_baresip_call_plays_a_wav_file(shared_dir: Path, tmp_path: Path) -> None:
    baresip = shutil.which("baresip")
    if baresip is None:
        pytest.skip("baresip (Debian baresip-core) is not installed; .ci/install.sh adds it")
    speech = load_speech(shared_dir, 3.0)
    wav = tmp_path / "speech.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(speech.astype("<i2").tobytes())
    rtp = free_udp_port()
    (tmp_path / "config").write_text(
        f"sip_listen\t127.0.0.1:{free_udp_tcp_port()}\n"
        "net_interface\t127.0.0.1\n"
        "audio_player\tnil,nil\n"
        "audio_alert\tnil,nil\n"
        f"audio_source\taufile,{wav}\n"
        f"rtp_ports\t{rtp}-{rtp + 10}\n"
        "module_path\t/usr/lib/baresip/modules\n"
        "module\tg711.so\n"
        "module\taufile.so\n"
        "module_app\taccount.so\n"
        "module_app\tmenu.so\n"
    )
    (tmp_path / "accounts").write_text(
        "<sip:tester@127.0.0.1;transport=udp>;regint=0;audio_codecs=PCMU\n"
    )
    with running_bridge() as bridge:
        dial = f"/dial sip:service@127.0.0.1:{bridge.sip_port}"
        result = subprocess.run(
            [baresip, "-4", "-f", str(tmp_path), "-e", dial, "-t", "6"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "Call established" in result.stdout, result.stdout[-2000:]
        assert wait_for(lambda: bridge.calls() == {})
        assert bridge.events() == [("started", ""), ("ended", "bye")]  # hung up at EOF
        (leg,) = bridge.publisher.events[0][1].legs.values()
        assert leg.codec == "PCMU"
        _, received = bridge.sink.captured(leg.leg_id).audio()
    assert received.size >= 0.9 * speech.size
    corr, lag, compared = _aligned_correlation(speech, received)
    assert corr >= 0.9, (corr, lag)
    assert compared >= 0.9 * speech.size and lag % 160 == 0  # whole frames (probation)
