"""Event streams read with the package's own parser, event by event as the bytes arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx

from lmsp_jupyter.client import ServerSentEvent, SseParser


def iter_events(response: httpx.Response) -> Iterator[ServerSentEvent]:
    """The events of a streamed response, each as soon as its bytes have arrived."""
    parser = SseParser()
    for chunk in response.iter_raw():
        yield from parser.feed(chunk)


async def aiter_events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The events of a streamed response of an ``AsyncClient``, each as soon as it arrived."""
    parser = SseParser()
    async for chunk in response.aiter_raw():
        for event in parser.feed(chunk):
            yield event


def parse_events(body: bytes) -> list[ServerSentEvent]:
    """The events of a whole stream read beforehand (the last one even without its blank line)."""
    return SseParser().feed(body + b"\n\n")
