"""A media source for the bridge's Amazon Connect adapter that reads Kinesis Video
Streams with GetMedia (boto3), for bridges that run where they can reach AWS.

boto3 is not a dependency of CallShield; install it next to the bridge
(``pip install boto3``), put this file on the bridge's ``PYTHONPATH`` and set
``CALLSHIELD_CONNECT_MEDIA_SOURCE=kvs_getmedia:GetMediaSource``. Credentials come from
boto3's usual chain (instance or task role); the role needs
``kinesisvideo:GetDataEndpoint`` and ``kinesisvideo:GetMedia`` on the Connect streams
(and ``kms:Decrypt`` when they are encrypted with a customer key).

The start: with the contact's ``start_timestamp`` (``StartTimestamp``), GetMedia starts
at the chunk holding that producer timestamp (``PRODUCER_TIMESTAMP``); with only
``start_fragment`` it starts *after* that fragment (``FRAGMENT_NUMBER`` means "after" in
GetMedia, so the first fragment is lost); with neither, ``NOW``. The adapter still
skips fragments numbered before ``start_fragment`` and stops when the stream's
``ContactId`` tag moves on. A GetMedia response ends after a while even on a live
stream; this source then resumes with the last ``AWS_KINESISVIDEO_CONTINUATION_TOKEN``
it saw, until a response brings nothing new.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from sip_bridge.adapters.connect_media import CHUNK, MediaRequest, MediaSourceError, stream_name

_TOKEN = re.compile(rb"AWS_KINESISVIDEO_CONTINUATION_TOKEN\x44\x87([\x80-\xff])")


def continuation_token(data: bytes) -> str | None:
    """The last continuation token in ``data`` (TagName then a short TagString)."""
    token = None
    for m in _TOKEN.finditer(data):
        length = m.group(1)[0] & 0x7F
        start = m.end()
        if start + length <= len(data):
            token = data[start : start + length].decode("ascii", "replace")
    return token


class GetMediaSource:
    def __init__(self, settings: Any = None, *, session: Any = None) -> None:
        self._session = session

    def open(self, request: MediaRequest) -> AsyncIterator[bytes]:
        if stream_name(request.stream_arn) is None:
            raise MediaSourceError(400, "stream_arn must be a Kinesis Video Streams stream ARN")
        return self._read(request)

    def _client(self, arn: str) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.session.Session()
        region = arn.split(":")[3]
        kv = self._session.client("kinesisvideo", region_name=region)
        endpoint = kv.get_data_endpoint(StreamARN=arn, APIName="GET_MEDIA")["DataEndpoint"]
        return self._session.client(
            "kinesis-video-media", endpoint_url=endpoint, region_name=region
        )

    async def _read(self, request: MediaRequest) -> AsyncIterator[bytes]:
        arn = request.stream_arn
        media = await asyncio.to_thread(self._client, arn)
        if request.start_timestamp:
            selector: dict[str, Any] = {
                "StartSelectorType": "PRODUCER_TIMESTAMP",
                "StartTimestamp": int(request.start_timestamp) / 1000,
            }
        elif request.start_fragment:
            selector = {
                "StartSelectorType": "FRAGMENT_NUMBER",
                "AfterFragmentNumber": request.start_fragment,
            }
        else:
            selector = {"StartSelectorType": "NOW"}
        while True:
            answer = await asyncio.to_thread(media.get_media, StreamARN=arn, StartSelector=selector)
            body = answer["Payload"]
            got, token = 0, None
            try:
                while chunk := await asyncio.to_thread(body.read, CHUNK):
                    got += len(chunk)
                    token = continuation_token(chunk) or token
                    yield chunk
            finally:
                body.close()
            if not got or token is None:
                return
            selector = {"StartSelectorType": "CONTINUATION_TOKEN", "ContinuationToken": token}
