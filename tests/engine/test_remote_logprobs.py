"""Penalties and logprobs through a remote engine: sent on in OpenAI's fields, and the
server's streamed logprobs come back with the text (a scripted server, as in
test_remote_engine.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from lmsp_jupyter.engine import generation
from tests.engine.test_remote_engine import chunk, engine, generate, listing, sse

ENTRY = {
    "token": "Ré",
    "logprob": -0.25,
    "bytes": [82, 195, 169],
    "top_logprobs": [
        {"token": "Ré", "logprob": -0.25, "bytes": [82, 195, 169]},
        {"token": "Bl", "logprob": -1.5},  # no bytes: its text as UTF-8
    ],
}


def sent(params: generation.SamplingParams, *frames: str) -> tuple[list[Any], dict[str, Any]]:
    """The events of generating with ``params`` from a server that streams ``frames``, and
    the body of the request it got."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        bodies.append(json.loads(request.content))
        return sse(*frames, "data: [DONE]\n\n")

    events = asyncio.run(generate(engine(handler), params))
    return events, bodies[0]


def test_penalties_and_logprobs_reach_the_server_and_its_logprobs_come_back() -> None:
    choice = {"index": 0, "delta": {"content": "Ré"}, "logprobs": {"content": [ENTRY]}}
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    params = generation.SamplingParams(
        max_tokens=8, frequency_penalty=1.5, presence_penalty=-0.5, top_logprobs=2
    )
    events, body = sent(
        params,
        f"data: {json.dumps({'choices': [choice]})}\n\n",
        chunk({}, "stop"),
        f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n",
    )
    top = ((b"R\xc3\xa9", -0.25), (b"Bl", -1.5))
    assert events == [
        generation.TextDelta("Ré", (generation.TokenLogprob(b"R\xc3\xa9", -0.25, top),)),
        generation.GenerationDone("stop", 3, 1),
    ]
    assert (body["frequency_penalty"], body["presence_penalty"]) == (1.5, -0.5)
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2)


def test_nothing_is_sent_for_penalties_and_logprobs_not_asked_for() -> None:
    _, body = sent(generation.SamplingParams(max_tokens=8), chunk({"content": "a"}, "stop"))
    names = {"frequency_penalty", "presence_penalty", "logprobs", "top_logprobs"}
    assert names.isdisjoint(body)
