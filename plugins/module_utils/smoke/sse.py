# -*- coding: utf-8 -*-
"""Server-sent events decoding for the smoke client: bytes and the times they arrived in, events out. No I/O.

``SSEDecoder.feed(data, now)`` takes one socket read and the ``perf_counter()`` taken right after it returned, and
returns the events that read completed, each as ``(now, payload)``. Every event completed by one read carries that
read's time (the client takes one timestamp per read, before any parsing). ``payload`` is

- the decoded JSON object (usually a dict) of a ``data:`` event,
- ``DONE`` for ``data: [DONE]``,
- an ``InvalidEvent`` for data that is not JSON.

Like ``vllm bench serve``'s handler: lines starting with ``:`` (comments, keep-alive pings) and the ``event:``,
``id:`` and ``retry:`` fields are dropped, several ``data:`` lines of one event are joined with ``\\n``, CRLF line ends
are accepted, and at the end of the body (``close``) a trailing event without its blank line still counts.
``decode_sse(reads)`` is the whole-stream form used by the tests.
"""
from __future__ import annotations

import json

DONE = "[DONE]"


class InvalidEvent(object):
    """A ``data:`` event whose text is not JSON."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __eq__(self, other):
        return isinstance(other, InvalidEvent) and other.text == self.text

    def __repr__(self):
        return "InvalidEvent(%r)" % self.text


def decode_data(data):
    """The text of one event's ``data`` -> ``DONE``, the decoded JSON value or an ``InvalidEvent``."""
    if data.startswith(b"[DONE]"):
        return DONE
    try:
        return json.loads(data)
    except ValueError:
        return InvalidEvent(data.decode(errors="replace")[:200])


class SSEDecoder(object):
    """Incremental decoder; ``feed`` per read, ``close`` at the end of the body."""

    def __init__(self):
        self._pending = b""
        self._data = []

    def _line(self, line, now, out):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line:
            if line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)  # one space belongs to the field
            return  # event:/id:/retry: fields and ":" comments carry nothing we need
        self._dispatch(now, out)

    def _dispatch(self, now, out):
        if self._data:
            data = b"\n".join(self._data)
            self._data = []
            out.append((now, decode_data(data)))

    def feed(self, data, now):
        """Events completed by ``data`` (bytes read at ``now``)."""
        self._pending += data
        if b"\n" not in data:
            return []
        lines = self._pending.split(b"\n")
        self._pending = lines.pop()
        out = []
        for line in lines:
            self._line(line, now, out)
        return out

    def close(self, now):
        """End of the body: a trailing event without the closing blank line."""
        out = []
        self._line(self._pending, now, out)
        self._line(b"", now, out)
        return out


def decode_sse(reads, end=None):
    """``[(now, bytes), ...]`` (one item per socket read) -> every event, ``[(now, payload), ...]``.

    ``end`` is the time the body ended (default: the last read's time)."""
    reads = list(reads)
    dec = SSEDecoder()
    out = []
    for now, data in reads:
        out.extend(dec.feed(data, now))
    out.extend(dec.close(reads[-1][0] if end is None and reads else end))
    return out
