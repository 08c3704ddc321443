"""The bridge's settings: flags over environment over config file over defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from sip_bridge.cli import build_parser
from sip_bridge.settings import Settings, split_host_port


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "callshield.toml"
    config.write_text(
        '[bridge]\nsip-listen = "10.0.0.1:5070"\nrtp_ports = "30000-30099"\nrtp_timeout_s = 12\n'
    )
    monkeypatch.setenv("CALLSHIELD_RTP_PORTS", "31000-31999")
    s = Settings.load(config, sip_listen=None, drain_timeout_s=5.0)
    assert s.sip_address == ("10.0.0.1", 5070)  # file
    assert s.rtp_range == (31000, 31999)  # environment beats the file
    assert (s.rtp_timeout_s, s.drain_timeout_s) == (12.0, 5.0)  # file, flag
    assert Settings.load(config, rtp_ports="20000-20999").rtp_range == (20000, 20999)


@pytest.mark.parametrize("bad", ["20000", "20999-20000", "a-b", "0-10"])
def test_bad_port_range(bad: str) -> None:
    with pytest.raises(ValueError, match="RTP port"):
        Settings(rtp_ports=bad)


def test_host_port_forms() -> None:
    assert split_host_port("[::1]:5062", 5060) == ("::1", 5062)
    assert split_host_port("0.0.0.0", 5060) == ("0.0.0.0", 5060)


def test_cli_flags() -> None:
    args = build_parser().parse_args(
        ["bridge", "--sip-listen", "127.0.0.1:5090", "--rtp-ports", "20000-20999"]
    )
    assert (args.sip_listen, args.rtp_ports) == ("127.0.0.1:5090", "20000-20999")
