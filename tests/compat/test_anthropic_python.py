"""The official ``anthropic`` Python SDK, unmodified, against Anthropic's Messages API on the
Jupyter port (``/lmsp/anthropic``) and the bundled model.

The bundled model is a small base model: texts are compared with the same greedy request
through LMSP in this run, never with fixed strings; a call is forced, so the decoder writes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest
from anthropic import Anthropic

from tests.conftest import EDITOR_TOKEN, MODEL, READER_TOKEN, LiveServer

WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Lisbon"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
PROMPT = "Name three colours."
#: Greedy decoding: this SDK's types have no ``temperature``, the API still takes it.
GREEDY: Any = {"temperature": 0}
#: The one user message of most tests (``Any``: the SDK's message types are TypedDicts).
ASKED: Any = [{"role": "user", "content": PROMPT}]


def base_url(server: LiveServer) -> str:
    """The Messages API's base URL, as Anthropic's clients take it."""
    return f"{server.root}lmsp/anthropic"


@pytest.fixture
def claude(live_server: LiveServer) -> Iterator[Anthropic]:
    """The SDK pointed at the Jupyter port, the server's token as its API key."""
    with Anthropic(
        base_url=base_url(live_server), api_key=live_server.token, max_retries=0
    ) as client:
        yield client


def body(error: anthropic.APIStatusError) -> Any:
    """The error object an error reply carried."""
    return error.body


def text_of(message: Any) -> str:
    """The text of a message's text blocks."""
    return "".join(block.text for block in message.content if block.type == "text")


def lmsp_text(client: httpx.Client, prompt: str, tokens: int) -> dict[str, Any]:
    """The same greedy request through LMSP: its text and usage."""
    body = {"model": MODEL, "input": prompt, "temperature": 0, "max_output_tokens": tokens}
    response = client.post("/responses", json=body).json()
    text = "".join(part["text"] for part in response["output"][0]["content"])
    return {"text": text, "usage": response["usage"]}


def ask(claude: Anthropic, model: str = MODEL, tokens: int = 8, **fields: Any) -> Any:
    return claude.messages.create(
        model=model, max_tokens=tokens, messages=ASKED, extra_body=GREEDY, **fields
    )


def test_create_says_what_lmsp_says(claude: Anthropic, client: httpx.Client) -> None:
    message = ask(claude)
    lmsp = lmsp_text(client, PROMPT, 8)
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text"
    assert message.content[0].text == lmsp["text"] != ""
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 8)
    usage = message.usage
    read = usage.cache_read_input_tokens or 0
    assert usage.input_tokens + read == lmsp["usage"]["input_tokens"]


def test_stream_gives_the_text_and_the_final_message(claude: Anthropic) -> None:
    whole = ask(claude)
    with claude.messages.stream(
        model=MODEL, max_tokens=8, messages=ASKED, extra_body=GREEDY
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 8
    # The same prompt again: all of it but its last token comes from the prefix cache.
    assert (final.usage.cache_read_input_tokens or 0) > 0


def test_a_forced_tool_use_and_its_result(claude: Anthropic) -> None:
    question: Any = {"role": "user", "content": "What is the weather in Paris?"}
    called = claude.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[question],
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert called.stop_reason == "tool_use"
    (use,) = [block for block in called.content if block.type == "tool_use"]
    assert use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER["input_schema"])
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 24 °C."}
    rounds: Any = [
        question,
        {"role": "assistant", "content": called.content},
        {"role": "user", "content": [result]},
    ]
    answered = claude.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=rounds,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "none"},
    )
    assert answered.stop_reason in ("end_turn", "max_tokens")
    assert [block.type for block in answered.content] == ["text"]


def test_a_streamed_forced_call_gives_its_input(claude: Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Lisbon?"}],
        tools=[WEATHER],
        tool_choice={"type": "any"},
    ) as stream:
        final = stream.get_final_message()
    (use,) = final.content
    assert use.type == "tool_use"
    jsonschema.validate(use.input, WEATHER["input_schema"])


def test_count_tokens_counts_the_prompt_create_reads(claude: Anthropic) -> None:
    counted = claude.messages.count_tokens(model=MODEL, messages=ASKED)
    usage = ask(claude).usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0) > 0


def test_a_claude_name_is_answered_by_the_default_model(claude: Anthropic) -> None:
    message = ask(claude, model="claude-sonnet-4-5")
    assert message.model == "claude-sonnet-4-5"
    assert text_of(message) == text_of(ask(claude)) != ""
    model = claude.models.retrieve("claude-haiku-4-5")
    assert model.id == "claude-haiku-4-5" and MODEL in model.display_name


def test_models_lists_the_local_models(claude: Anthropic) -> None:
    assert MODEL in [model.id for model in claude.models.list()]


def test_an_invalid_request_is_a_bad_request_error_in_anthropics_shape(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(claude, tokens=0)
    assert caught.value.status_code == 400
    error = body(caught.value)
    assert error == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": error["error"]["message"]},
    }
    assert "max_tokens" in error["error"]["message"]


def test_an_image_is_refused_with_a_clear_bad_request(claude: Anthropic) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    messages: Any = [{"role": "user", "content": [image]}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=MODEL, max_tokens=4, messages=messages)
    assert "images are not supported" in str(caught.value)


def test_a_prompt_over_the_window_is_an_invalid_request_that_says_so(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "word " * 40_000}]
        )
    assert "context window" in body(caught.value)["error"]["message"]


def test_an_unknown_model_is_not_found(claude: Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        ask(claude, model="gpt-nothing")
    assert body(caught.value)["error"]["type"] == "not_found_error"


def test_a_wrong_key_is_an_authentication_error(live_server: LiveServer) -> None:
    wrong = Anthropic(base_url=base_url(live_server), api_key="wrong", max_retries=0)
    with wrong as claude, pytest.raises(anthropic.AuthenticationError) as caught:
        ask(claude)
    assert body(caught.value)["error"]["type"] == "authentication_error"


def test_a_scoped_token_works_as_a_bearer_auth_token(live_server: LiveServer) -> None:
    with Anthropic(
        base_url=base_url(live_server), auth_token=EDITOR_TOKEN, max_retries=0
    ) as claude:
        assert ask(claude, tokens=2).usage.output_tokens == 2


def test_a_token_without_responses_write_is_a_permission_error(live_server: LiveServer) -> None:
    with Anthropic(base_url=base_url(live_server), api_key=READER_TOKEN, max_retries=0) as claude:
        with pytest.raises(anthropic.PermissionDeniedError):
            ask(claude)
        assert MODEL in [model.id for model in claude.models.list()]
