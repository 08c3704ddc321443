"""Where an Amazon Connect contact's Kinesis Video Streams media comes from.

The Connect adapter reads any byte stream of Matroska fragments; a
:class:`MediaSource` turns a contact's ``stream_arn`` and ``start_fragment`` into one.
The bridge ships no AWS client (boto3 is not a dependency of the media process):

- :class:`LocalMediaSource`, the default, reads a capture of the stream from
  ``connect_media_dir``: ``<stream name>.mkv`` for a KVS stream ARN (what
  ``aws kinesis-video-media get-media --stream-arn ARN --start-selector ... NAME.mkv``
  writes), a relative path (``file:rel/path.mkv`` or ``rel/path.mkv``) inside that
  directory (a FIFO works: ``mkfifo`` there and pipe ``get-media`` into it), or ``-`` for
  the bridge's standard input when ``connect_media_stdin`` is on. Paths never leave the
  directory.
- A plug-in, ``connect_media_source = "module:factory"``: ``factory(settings)`` returns a
  :class:`MediaSource`. ``deploy/connect/kvs_getmedia.py`` is one that calls GetMedia
  with boto3 (installed next to the bridge by whoever uses it) and yields the body.

``open`` checks the request at once (raising :class:`MediaSourceError` with an HTTP
status, before any call is created) and returns an async iterator of chunks; blocking
reads run in a worker thread so the bridge's loop never waits on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from sip_bridge.settings import Settings

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class MediaRequest:
    contact_id: str
    stream_arn: str
    start_fragment: str | None = None  # KVS fragment number where the contact starts
    start_timestamp: str | None = None  # its producer timestamp, ms since the epoch


class MediaSourceError(Exception):
    """The request cannot be served: ``status`` is the HTTP answer (400, 403, 404, 409)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class MediaSource(Protocol):
    def open(self, request: MediaRequest) -> AsyncIterator[bytes]:
        """Check ``request`` now (MediaSourceError) and return the stream's bytes, from
        ``start_fragment`` where the source can seek (the adapter skips earlier
        fragments by their fragment-number tag either way)."""
        ...


def stream_name(arn: str) -> str | None:
    """``arn:aws:kinesisvideo:REGION:ACCOUNT:stream/NAME/CREATION`` -> NAME."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "kinesisvideo":
        return None
    kind, _, rest = parts[5].partition("/")
    name = rest.rpartition("/")[0] or rest
    return name if kind == "stream" and name else None


class LocalMediaSource:
    """Captures in ``directory`` and (if allowed) standard input; see the module doc."""

    def __init__(self, directory: Path | None, allow_stdin: bool = False) -> None:
        self.directory = directory.resolve() if directory is not None else None
        self.allow_stdin = allow_stdin
        self._stdin_busy = False

    def open(self, request: MediaRequest) -> AsyncIterator[bytes]:
        if request.stream_arn == "-":
            if not self.allow_stdin:
                raise MediaSourceError(403, "reading standard input is off (connect_media_stdin)")
            if self._stdin_busy:
                raise MediaSourceError(409, "standard input is being read for another contact")
            return self._stdin()
        return self._file(self._path(request.stream_arn))

    def _path(self, arn: str) -> Path:
        if self.directory is None:
            raise MediaSourceError(403, "no capture directory (connect_media_dir)")
        name = stream_name(arn)
        if name is not None:
            rel = f"{name}.mkv"
        elif arn.startswith("arn:"):
            raise MediaSourceError(400, "not a Kinesis Video Streams stream ARN")
        else:
            rel = arn.removeprefix("file:")
        path = (self.directory / rel).resolve()
        if not path.is_relative_to(self.directory) or path == self.directory:
            raise MediaSourceError(400, "the path leaves connect_media_dir")
        try:
            mode = path.stat().st_mode
        except OSError:
            raise MediaSourceError(404, f"no capture {rel!r} in connect_media_dir") from None
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise MediaSourceError(400, f"{rel!r} is not a file or FIFO")
        return path

    async def _file(self, path: Path) -> AsyncIterator[bytes]:
        f = cast(BinaryIO, await asyncio.to_thread(path.open, "rb"))  # a FIFO waits here
        try:
            while chunk := await asyncio.to_thread(f.read, CHUNK):
                yield chunk
        finally:
            f.close()

    async def _stdin(self) -> AsyncIterator[bytes]:
        fd = sys.stdin.fileno()
        self._stdin_busy = True
        try:
            while chunk := await asyncio.to_thread(os.read, fd, CHUNK):
                yield chunk
        finally:
            self._stdin_busy = False


def load_media_source(settings: Settings) -> MediaSource | None:
    """The configured source; None when the Connect adapter is off (nothing configured).
    A plug-in that cannot be loaded fails loudly at start-up."""
    if settings.connect_media_source:
        module, sep, attr = settings.connect_media_source.partition(":")
        if not sep or not module or not attr:
            raise ValueError("connect_media_source must look like 'package.module:factory'")
        factory = cast(
            Callable[[Settings], MediaSource], getattr(importlib.import_module(module), attr)
        )
        return factory(settings)
    if settings.connect_media_dir or settings.connect_media_stdin:
        directory = Path(settings.connect_media_dir) if settings.connect_media_dir else None
        return LocalMediaSource(directory, settings.connect_media_stdin)
    return None


async def aclose(stream: AsyncIterator[bytes]) -> None:
    """Close an async generator the adapter stopped reading early."""
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()
