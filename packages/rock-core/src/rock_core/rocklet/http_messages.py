"""The rocklet's HTTP messages: a request as a handler sees it, its body, and the response.

* :class:`Request`: method, path, query, lower-cased headers, ``{name}`` parameters, the body
  (or a :class:`BodyReader` for routes that stream it);
* :class:`BodyReader`: a body by ``Content-Length`` or chunked, never read past its end;
* :class:`Response`: one JSON document, raw bytes of known length, or a stream;
  :func:`json_response`, and :func:`error_response` for ROCK's 511.

:mod:`.server` parses them off the connection and writes them back.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Callable, Iterable
    from typing import Any

from .errors import BadRequest, class_path_of

__all__ = [
    "BodyReader",
    "Request",
    "Response",
    "json_response",
    "error_response",
    "parse_query",
    "unquote",
    "MAX_LINE",
]

#: The longest request line, header line or chunk-size line read.
MAX_LINE = 65536


def unquote(text: str, plus: bool = True) -> str:
    """Percent-decode ``text`` (UTF-8), turning ``+`` into a space when ``plus``."""
    if plus:
        text = text.replace("+", " ")
    if "%" not in text:
        return text
    out = bytearray()
    parts = text.split("%")
    out += parts[0].encode("utf-8")
    for part in parts[1:]:
        try:
            out.append(int(part[:2], 16))
            out += part[2:].encode("utf-8")
        except ValueError:
            out += ("%" + part).encode("utf-8")
    return out.decode("utf-8", "replace")


def parse_query(query: str) -> dict[str, str]:
    """``a=1&b=x`` → ``{"a": "1", "b": "x"}`` (the last value of a repeated key wins)."""
    result: dict[str, str] = {}
    for pair in query.split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        result[unquote(key)] = unquote(value)
    return result


class BodyReader:
    """Reads one request body from the connection, by length or chunked, never past its end."""

    def __init__(self, rfile: Any, length: int | None, chunked: bool) -> None:
        self._rfile = rfile
        self._remaining = length if length is not None else 0
        self._chunked = chunked
        self._chunk_left = 0
        self.done = not chunked and not self._remaining

    def read(self, size: int = 65536) -> bytes:
        """Up to ``size`` bytes of the body; ``b""`` at its end."""
        if self.done:
            return b""
        if not self._chunked:
            data: bytes = self._rfile.read(min(size, self._remaining))
            if not data:
                raise BadRequest("request body ended early")
            self._remaining -= len(data)
            self.done = self._remaining == 0
            return data
        if self._chunk_left == 0:
            line = self._rfile.readline(MAX_LINE)
            try:
                self._chunk_left = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest("malformed chunked request body") from None
            if self._chunk_left == 0:
                # Trailer section: skip header lines up to the blank one.
                while True:
                    line = self._rfile.readline(MAX_LINE)
                    if line in (b"\r\n", b"\n", b""):
                        break
                self.done = True
                return b""
        chunk: bytes = self._rfile.read(min(size, self._chunk_left))
        if not chunk:
            raise BadRequest("request body ended early")
        self._chunk_left -= len(chunk)
        if self._chunk_left == 0:
            self._rfile.readline(MAX_LINE)  # the CRLF after each chunk
        return chunk

    def read_all(self) -> bytes:
        """The rest of the body."""
        parts = []
        while not self.done:
            data = self.read(1 << 20)
            if data:
                parts.append(data)
        return b"".join(parts)

    def drain(self) -> None:
        """Read and drop whatever the handler left, so the connection can serve the next request."""
        while not self.done:
            self.read(1 << 20)


class Request:
    """One parsed request: ``method``, ``path``, ``query``, lower-cased ``headers``, the body.

    ``body`` holds the whole body for ordinary routes; routes registered with ``raw_body=True``
    read it themselves from ``reader`` (uploads stream to disk this way).
    """

    __slots__ = ("method", "path", "query", "headers", "body", "reader", "params")

    def __init__(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        reader: BodyReader,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.reader = reader
        self.body = b""
        self.params: dict[str, str] = {}

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (an empty body is ``{}``); anything else is a 400."""
        if not self.body.strip():
            return {}
        import json  # here: the rocklet listens and answers its readiness probe without it

        try:
            data = json.loads(self.body)
        except ValueError as exc:
            raise BadRequest("request body is not valid JSON: %s" % exc) from None
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object, got %s" % type(data).__name__)
        return data


class Response:
    """What a handler answers.

    :param body: the whole body, or ``None`` when ``stream`` yields it.
    :param stream: an iterator of byte chunks; sent with ``Content-Length: length`` when
        ``length`` is known, else with chunked transfer encoding (flushed chunk by chunk).
    """

    __slots__ = ("status", "body", "content_type", "headers", "stream", "length", "after")

    def __init__(
        self,
        body: bytes | None = b"",
        *,
        status: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        stream: Iterable[bytes] | None = None,
        length: int | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers or {}
        self.stream = stream
        self.length = length
        #: Called once the response is sent (``/shutdown`` ends the process there).
        self.after: Callable[[], None] | None = None


def _dumps(obj: Any) -> bytes:
    import json  # here: json (and re, which it imports) is not needed to start

    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate from a client's JSON: escape everything instead of failing.
        return json.dumps(obj, separators=(",", ":")).encode("ascii")


def json_response(obj: Any, status: int = 200) -> Response:
    """A JSON response of ``obj``."""
    return Response(_dumps(obj), status=status)


def error_response(exc: BaseException, tb: str) -> Response:
    """ROCK's 511 answer for an uncaught exception."""
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc)
    payload = {
        "rockletexception": {
            "message": message,
            "class_path": class_path_of(exc),
            "traceback": tb,
            "extra_info": getattr(exc, "extra_info", None) or {},
        }
    }
    return json_response(payload, status=511)
