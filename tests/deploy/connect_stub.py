"""A stand-in for boto3's session in the GetMedia plug-in test (AWS cannot be reached
here): it serves recorded GetMedia bodies in order and records the StartSelectors the
plug-in (deploy/connect/kvs_getmedia.py) asks for. The bridge loads :func:`source`
through ``connect_media_source = "tests.deploy.connect_stub:source"``."""

from __future__ import annotations

import io
from typing import Any

from deploy.connect.kvs_getmedia import GetMediaSource

responses: list[bytes] = []
selectors: list[dict[str, Any]] = []
endpoints: list[tuple[str, str]] = []


class _Media:
    def get_media(self, StreamARN: str, StartSelector: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        selectors.append(StartSelector)
        return {"Payload": io.BytesIO(responses.pop(0) if responses else b"")}


class _Video:
    def get_data_endpoint(self, StreamARN: str, APIName: str) -> dict[str, str]:  # noqa: N803
        endpoints.append((StreamARN, APIName))
        return {"DataEndpoint": "https://s-0123.kinesisvideo.eu-west-2.amazonaws.com"}


class _Session:
    def client(self, name: str, **_: Any) -> Any:
        return _Video() if name == "kinesisvideo" else _Media()


def source(settings: Any) -> GetMediaSource:
    return GetMediaSource(settings, session=_Session())
