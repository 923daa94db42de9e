"""One part of a multipart upload as a file (:class:`_Part`), for :mod:`rock_archive_s3.store`."""

from __future__ import annotations

import bisect
import io
import itertools
from typing import Any

__all__ = ["_Part"]


class _Part(io.RawIOBase):
    """One part of a multipart upload as a readable, seekable file over the chunks it is made
    of, for botocore to checksum, sign and send without joining them (a copy of each part in
    flight; botocore would also glue a ``bytes`` body to the request's headers, another one)."""

    def __init__(self, views: list[memoryview]) -> None:
        super().__init__()
        self._views = views
        self._starts = list(itertools.accumulate((len(v) for v in views), initial=0))
        self.size = self._starts[-1]
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self.size:
            return 0
        index = bisect.bisect_right(self._starts, self._pos) - 1
        offset = self._pos - self._starts[index]
        piece = self._views[index][offset : offset + len(buffer)]
        n = len(piece)
        memoryview(buffer).cast("B")[:n] = piece
        self._pos += n
        return n

    def __len__(self) -> int:
        return self.size
