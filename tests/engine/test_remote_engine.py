"""The remote engine's rules that a real server cannot be made to show on demand.

A scripted OpenAI-compatible transport stands in for the server here; the main paths run
against real servers in tests/server/test_remote.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lmsp_jupyter.engine import generation
from lmsp_jupyter.engine.catalog import ModelCatalog
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.remote import RemoteEngine, RemoteServer
from lmsp_jupyter.engine.remote.tokens import TEMPLATE_TOKENS, TEMPLATE_TOKENS_PER_MESSAGE
from lmsp_jupyter.engine.router import EngineRouter
from lmsp_jupyter.protocol.errors import LmspError

Handler = Callable[[httpx.Request], httpx.Response]


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({'choices': [choice]})}\n\n"


def sse(*frames: str) -> httpx.Response:
    return httpx.Response(200, text="".join(frames), headers={"content-type": "text/event-stream"})


def listing(*models: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": list(models)})


def engine(handler: Handler, **config: Any) -> RemoteEngine:
    server = RemoteServer.parse({"name": "gpu", "url": "http://gpu:8000/v1", **config})
    return RemoteEngine(server, transport=httpx.MockTransport(handler))


def one_model(rest: Handler, paths: list[str] | None = None) -> RemoteEngine:
    """An engine on a server that lists one model, ``m``, and answers the other requests with
    ``rest``; the path of each request is appended to ``paths``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if paths is not None:
            paths.append(request.url.path)
        if request.url.path == "/v1/models":
            return listing({"id": "m"})
        return rest(request)

    return engine(handler)


async def generate(
    remote: RemoteEngine, params: generation.SamplingParams
) -> list[generation.GenerationEvent]:
    entry = remote.get("gpu/m")
    prompt = await remote.render(entry, [generation.ChatMessage("user", "hi")])
    return [
        event async for event in remote.generate(entry, prompt, params, generation.CancelToken())
    ]


# --- configuration ------------------------------------------------------------------------------


def test_a_server_entry_with_an_unknown_key_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"remote server 'gpu': colour: Extra inputs"):
        RemoteServer.parse({"name": "gpu", "url": "http://gpu/v1", "colour": "red"})


def test_a_server_name_must_fit_in_a_model_id() -> None:
    with pytest.raises(ValueError, match="name"):
        RemoteServer.parse({"name": "a b", "url": "http://gpu/v1"})


def test_the_api_key_is_read_from_the_named_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPU_KEY", "sk-secret")
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return listing({"id": "m"})

    remote = engine(handler, api_key_env="GPU_KEY", headers={"X-Team": "a"})
    asyncio.run(remote.refresh())
    assert seen == ["Bearer sk-secret"]


# --- listing ------------------------------------------------------------------------------------


def test_models_are_limited_and_renamed_and_keep_the_reported_window() -> None:
    remote = engine(
        lambda _: listing({"id": "org/big", "max_model_len": 32768}, {"id": "other"}),
        models={"org/big": "big"},
    )
    assert [(e.id, e.available) for e in remote.list()] == [("gpu/big", False)]
    asyncio.run(remote.refresh())
    (entry,) = remote.list()
    assert (entry.id, entry.owned_by, entry.available) == ("gpu/big", "gpu", True)
    assert remote.context_length(entry) == 32768
    with pytest.raises(LmspError) as error:
        remote.get("gpu/other")
    assert error.value.code == "model_not_found"


def test_a_server_that_does_not_answer_lists_its_models_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    remote = engine(refuse, models=["m"])
    asyncio.run(remote.refresh())
    assert [(e.id, e.available) for e in remote.list()] == [("gpu/m", False)]
    with pytest.raises(generation.EngineUnavailable):
        asyncio.run(generate(remote, generation.SamplingParams(max_tokens=4)))


def test_the_router_sends_a_servers_prefix_to_that_server_and_the_rest_to_the_catalog() -> None:
    remote = engine(lambda _: listing({"id": "m"}))
    router = EngineRouter(LocalEngine(), ModelCatalog(include_bundled=False), [remote])
    asyncio.run(router.refresh())
    assert [entry.id for entry in router.list()] == ["gpu/m"]
    assert router.get("gpu/m").owned_by == "gpu"
    with pytest.raises(LmspError):
        router.get("elsewhere/m")


def test_concurrent_first_requests_share_one_listing_and_all_get_their_answer() -> None:
    paths: list[str] = []
    remote = one_model(
        lambda _: sse(chunk({"content": "ok"}), chunk({}, "stop"), "data: [DONE]\n\n"), paths
    )
    router = EngineRouter(LocalEngine(), ModelCatalog(include_bundled=False), [remote])
    params = generation.SamplingParams(max_tokens=1)

    async def first_requests() -> list[list[generation.GenerationEvent]]:
        # The start-up refresh and three requests that each ask the server before rendering.
        starting = asyncio.ensure_future(router.refresh())
        answers = await asyncio.gather(*(generate(remote, params) for _ in range(3)))
        await starting
        return answers

    answers = asyncio.run(first_requests())
    assert [answer[0] for answer in answers] == [generation.TextDelta("ok")] * 3
    assert paths.count("/v1/models") == 1


def router_on_a_held_listing(
    released: asyncio.Event, first_listing_seconds: float
) -> tuple[EngineRouter, list[str]]:
    """A router on one server whose listing of its model ``m`` waits for ``released``; the
    path of each request it gets is in the list."""
    paths: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        await released.wait()
        return listing({"id": "m"})

    server = RemoteServer.parse({"name": "gpu", "url": "http://gpu:8000/v1"})
    remote = RemoteEngine(server, transport=httpx.MockTransport(handler))
    catalog = ModelCatalog(include_bundled=False)
    return EngineRouter(
        LocalEngine(), catalog, [remote], first_listing_seconds=first_listing_seconds
    ), paths


def test_the_first_listing_waits_for_a_server_being_asked_and_shows_its_models() -> None:
    async def listed() -> list[tuple[str, bool]]:
        released = asyncio.Event()
        router, paths = router_on_a_held_listing(released, first_listing_seconds=600)
        starting = asyncio.ensure_future(router.refresh())  # the start-up refresh
        waiting = asyncio.ensure_future(router.first_listing())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()
        released.set()
        await asyncio.gather(starting, waiting)
        assert paths == ["/v1/models"]  # the listing waited for the same request
        return [(entry.id, entry.available) for entry in router.list()]

    assert asyncio.run(listed()) == [("gpu/m", True)]


def test_the_first_listing_waits_no_longer_than_its_bound() -> None:
    async def listed() -> list[str]:
        released = asyncio.Event()
        router, _ = router_on_a_held_listing(released, first_listing_seconds=0.01)
        await router.first_listing()  # the server has not answered: the bound ends the wait
        models = [entry.id for entry in router.list()]
        released.set()
        return models

    assert asyncio.run(listed()) == []


def test_a_listing_does_not_wait_for_a_server_that_failed_to_answer() -> None:
    paths: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        raise httpx.ConnectError("refused", request=request)

    router = EngineRouter(LocalEngine(), ModelCatalog(include_bundled=False), [engine(refuse)])
    for _ in range(2):
        asyncio.run(router.first_listing())
    assert paths == ["/v1/models"]  # asked once, by the first listing


# --- generating ---------------------------------------------------------------------------------


def test_a_refused_json_schema_form_is_retried_as_json_object_and_remembered() -> None:
    formats: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        body = json.loads(request.content)
        if not body["stream"]:  # the count of an unreported prompt
            return httpx.Response(200, json={"usage": {"prompt_tokens": 9}})
        formats.append(body["response_format"]["type"])
        if body["response_format"]["type"] == "json_schema":
            return httpx.Response(500, json={"error": {"message": "response_format: bad type"}})
        assert body["response_format"]["schema"] == {"type": "object"}
        return sse(chunk({"content": "{}"}), chunk({}, "stop"), "data: [DONE]\n\n")

    remote = engine(handler)
    params = generation.SamplingParams(max_tokens=4, schema={"type": "object"})
    for _ in range(2):
        events = asyncio.run(generate(remote, params))
        assert events[0] == generation.TextDelta("{}")
    assert formats == ["json_schema", "json_object", "json_object"]


@pytest.mark.parametrize("takes_it", [True, False])
def test_a_prediction_is_sent_on_only_to_a_server_that_takes_it(takes_it: bool) -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        bodies.append(json.loads(request.content))
        return sse(chunk({"content": "ok"}), chunk({}, "stop"), "data: [DONE]\n\n")

    remote = engine(handler, predicted_outputs=takes_it)
    params = generation.SamplingParams(max_tokens=4, prediction="ok")
    asyncio.run(generate(remote, params))
    streamed = [body for body in bodies if body.get("stream")]
    expected = [{"type": "content", "content": "ok"}] if takes_it else []
    assert [body["prediction"] for body in streamed if "prediction" in body] == expected


def test_a_request_is_retried_while_nothing_of_the_answer_has_come() -> None:
    statuses = iter([503, 502, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        if not json.loads(request.content)["stream"]:  # the count of an unreported prompt
            return httpx.Response(200, json={"usage": {"prompt_tokens": 9}})
        status = next(statuses)
        if status != 200:
            return httpx.Response(status)
        return sse(chunk({"content": "ok"}), chunk({}, "length"), "data: [DONE]\n\n")

    events = asyncio.run(generate(engine(handler), generation.SamplingParams(max_tokens=1)))
    assert events == [generation.TextDelta("ok"), generation.GenerationDone("max_tokens", 9, 1)]


def test_a_request_still_refused_after_its_retries_is_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        return httpx.Response(503)

    remote = engine(handler, retries=1)
    with pytest.raises(generation.EngineUnavailable):
        asyncio.run(generate(remote, generation.SamplingParams(max_tokens=1)))
    assert not remote.reachable


def test_a_stream_cut_after_its_first_token_fails_without_a_retry() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        calls.append("chat")
        return sse(chunk({"content": "Hel"}))  # no finish_reason, no [DONE]: the link broke

    remote = engine(handler)
    with pytest.raises(generation.EngineError) as error:
        asyncio.run(generate(remote, generation.SamplingParams(max_tokens=8)))
    assert not isinstance(error.value, generation.EngineUnavailable)
    assert "mid-answer" in str(error.value)
    assert calls == ["chat"]
    assert not remote.reachable


def test_tool_calls_usage_and_the_forced_tool_reach_the_server_and_come_back() -> None:
    bodies: list[dict[str, Any]] = []
    call = {"index": 0, "id": "x", "type": "function", "function": {"name": "f", "arguments": ""}}
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        bodies.append(json.loads(request.content))
        more = {"index": 0, "function": {"arguments": '{"a": 1}'}}
        return sse(
            chunk({"tool_calls": [call]}),
            chunk({"tool_calls": [more]}),
            chunk({}, "tool_calls"),
            f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n",
            "data: [DONE]\n\n",
        )

    params = generation.SamplingParams(max_tokens=8, temperature=0.0, forced_tools=("f",))
    events = asyncio.run(generate(engine(handler), params))
    assert events == [
        generation.ToolCallDelta(0, "f", ""),
        generation.ToolCallDelta(0, None, '{"a": 1}'),
        generation.GenerationDone("stop", 7, 3, cached_tokens=4),
    ]
    assert bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert bodies[0]["temperature"] == 0.0
    assert bodies[0]["max_tokens"] == 8
    assert bodies[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_a_stream_without_usage_counts_its_prompt_by_the_same_request_cut_at_one_token() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        bodies.append(json.loads(request.content))
        if bodies[-1]["stream"]:
            return sse(chunk({"content": "a"}), chunk({"content": "b"}, "stop"), "data: [DONE]\n\n")
        return httpx.Response(200, json={"usage": {"prompt_tokens": 12, "completion_tokens": 1}})

    events = asyncio.run(generate(engine(handler), generation.SamplingParams(max_tokens=8)))
    assert events == [
        generation.TextDelta("a"),
        generation.TextDelta("b"),
        generation.GenerationDone("stop", 12, 2),
    ]
    streamed, counted = bodies
    assert streamed["stream_options"] == {"include_usage": True}
    assert counted == {
        **{key: value for key, value in streamed.items() if key != "stream_options"},
        "stream": False,
        "max_tokens": 1,
    }


def test_a_prompt_whose_usage_the_server_will_not_give_is_counted_as_before_sending() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 5})
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        if json.loads(request.content)["stream"]:
            return sse(chunk({"content": "a"}, "stop"), "data: [DONE]\n\n")
        return httpx.Response(200, json={"choices": []})

    events = asyncio.run(generate(one_model(handler), generation.SamplingParams(max_tokens=8)))
    assert events[-1] == generation.GenerationDone("stop", 5, 1)


def test_reasoning_content_and_reasoning_deltas_are_reasoning_apart_from_the_text() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return listing({"id": "m"})
        usage = {"prompt_tokens": 3, "completion_tokens": 4}
        return sse(
            chunk({"reasoning_content": "Think"}),
            chunk({"reasoning": "ing."}),  # vLLM's newer name
            chunk({"reasoning_content": None, "content": "Red"}),
            chunk({}, "stop"),
            f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n",
            "data: [DONE]\n\n",
        )

    events = asyncio.run(generate(engine(handler), generation.SamplingParams(max_tokens=8)))
    assert events == [
        generation.ReasoningDelta("Think"),
        generation.ReasoningDelta("ing."),
        generation.TextDelta("Red"),
        generation.GenerationDone("stop", 3, 4),
    ]


# --- counting a prompt before it is sent ------------------------------------------------------


async def count(remote: RemoteEngine) -> tuple[int, bool]:
    entry = remote.get("gpu/m")
    prompt = await remote.render(entry, [generation.ChatMessage("user", "hi")])
    assert prompt.bound is not None and prompt.counter is not None
    assert prompt.length == prompt.bound >= len('{"role": "user", "content": "hi"}')
    return await prompt.counter()


def test_llama_server_counts_the_prompt_it_renders() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/apply-template":
            assert body == {"messages": [{"role": "user", "content": "hi"}]}
            return httpx.Response(200, json={"prompt": "<user>hi<model>"})
        assert request.url.path == "/tokenize"
        assert body == {"content": "<user>hi<model>", "add_special": True, "parse_special": True}
        return httpx.Response(200, json={"tokens": [2, 5, 6, 7]})

    remote = one_model(handler, paths)
    assert asyncio.run(count(remote)) == (4, True)
    assert asyncio.run(count(remote)) == (4, True)
    assert paths == ["/v1/models", "/apply-template", "/tokenize", "/apply-template", "/tokenize"]


def test_vllm_counts_the_messages_it_is_given() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/tokenize":
            return httpx.Response(404)
        body = json.loads(request.content)
        assert body["model"] == "m" and body["add_generation_prompt"] is True
        return httpx.Response(200, json={"count": 11, "tokens": [0] * 11})

    remote = one_model(handler, paths)
    assert asyncio.run(count(remote)) == (11, True)
    assert asyncio.run(count(remote)) == (11, True)
    assert paths == ["/v1/models", "/apply-template", "/tokenize", "/tokenize"]


def test_a_server_that_tokenizes_text_only_gives_an_estimate_that_errs_high() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/extras/tokenize/count":
            return httpx.Response(404)
        assert json.loads(request.content) == {"model": "m", "input": "user\nhi"}
        return httpx.Response(200, json={"count": 4})

    tokens, exact = asyncio.run(count(one_model(handler)))
    assert (tokens, exact) == (4 + TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS, False)


def test_a_server_that_cannot_count_leaves_the_upper_bound() -> None:
    remote = one_model(lambda _: httpx.Response(404))
    entry = remote.get("gpu/m")
    prompt = asyncio.run(remote.render(entry, [generation.ChatMessage("user", "hi")]))
    assert asyncio.run(count(remote)) == (prompt.bound, False)
