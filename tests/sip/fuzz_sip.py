"""atheris fuzz target for the SIP, SDP, multipart and SIPREC parsers (coverage-guided;
the Hypothesis properties in test_sip_fuzz.py run the same checks in pytest).

    .venv/bin/pip install atheris
    .venv/bin/python tests/sip/fuzz_sip.py -atheris_runs=200000 -max_len=4096

Any exception other than ValueError (SipParseError is one), or a round trip that does
not reproduce the same bytes, is a crash that atheris reports with its input.
"""

from __future__ import annotations

import sys

import atheris  # type: ignore[import-not-found]

with atheris.instrument_imports():
    from sip_bridge.sip.message import SipParseError, parse_message
    from sip_bridge.sip.multipart import ContentType, Multipart
    from sip_bridge.sip.sdp import SessionDescription
    from sip_bridge.sip.siprec import RecordingMetadata


def test_one_input(data: bytes) -> None:
    selector, body = (data[0] % 4, data[1:]) if data else (0, b"")
    if selector == 0:
        try:
            message = parse_message(body)
        except SipParseError:
            return
        if bytes(parse_message(bytes(message))) != bytes(message):
            raise AssertionError("SIP round trip changed the message")
    elif selector == 1:
        try:
            sdp = SessionDescription.parse(body)
        except ValueError:
            return
        for m in sdp.media:
            _ = (m.rtpmaps, m.direction, m.label, m.ptime)
        if bytes(SessionDescription.parse(bytes(sdp))) != bytes(sdp):
            raise AssertionError("SDP round trip changed the description")
    elif selector == 2:
        try:
            Multipart.parse(body, ContentType.parse("multipart/mixed;boundary=b"))
        except ValueError:
            return
    else:
        try:
            RecordingMetadata.parse(body).roles()
        except ValueError:
            return


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
