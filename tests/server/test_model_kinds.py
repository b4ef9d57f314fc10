"""A model's kind comes from its files, and a base model gets the text as it is: one text is
the prompt ``/completions`` reads, a conversation its plain transcript (``docs/base-models.md``);
on the bundled base model and on a copy of it with a chat template, in the server process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from lmsp_jupyter.engine.generation import ChatMessage
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.templates import ChatTemplate
from tests.chat_template import GEMMA_TEMPLATE
from tests.conftest import MODEL
from tests.helpers import message_text
from tests.server.helpers import server_config

#: The chat copy's id: its file name in its model directory.
CHAT_MODEL = "model"
PATTERN = (
    "Country: France -> Capital: Paris\n"
    "Country: Japan -> Capital: Tokyo\n"
    "Country: Italy -> Capital: Rome"
)


@pytest.fixture
def chat_templates() -> dict[str, str]:
    """``LmspApp.chat_templates`` of the server (a test parametrizes it)."""
    return {}


@pytest.fixture
def jp_server_config(
    request: pytest.FixtureRequest, chat_model_path: Path, chat_templates: dict[str, str]
) -> Config:
    """The in-process server, with the chat copy of the bundled model in a model directory."""
    return server_config(
        request, model_dirs=[str(chat_model_path.parent)], chat_templates=chat_templates
    )


async def completion(lmsp: httpx.AsyncClient, text: str, tokens: int = 12) -> tuple[int, str]:
    """The prompt tokens and the greedy text of ``/completions`` continuing ``text``."""
    body = {"model": MODEL, "prompt": text, "max_tokens": tokens, "temperature": 0}
    done = (await lmsp.post("/completions", json=body)).json()
    return done["usage"]["prompt_tokens"], done["choices"][0]["text"]


async def response(lmsp: httpx.AsyncClient, tokens: int = 12, **fields: Any) -> dict[str, Any]:
    """A greedy ``/responses`` answer of the bundled model."""
    body = {"model": MODEL, "temperature": 0, "max_output_tokens": tokens, **fields}
    answer = await lmsp.post("/responses", json=body)
    assert answer.status_code == 200, answer.text
    done: dict[str, Any] = answer.json()
    return done


def read(answer: dict[str, Any]) -> tuple[int, str]:
    """An answer's prompt tokens and text."""
    return answer["usage"]["input_tokens"], message_text(answer)


async def test_the_listing_says_which_model_is_a_base_model_and_which_a_chat_model(
    lmsp: httpx.AsyncClient,
) -> None:
    listed = (await lmsp.get("/models")).json()["data"]
    kinds = {model["id"]: model["extensions"]["x-lmsp-jupyter"]["kind"] for model in listed}
    assert kinds == {MODEL: "base", CHAT_MODEL: "chat"}


async def test_a_base_models_string_input_is_the_prompt_completions_reads(
    lmsp: httpx.AsyncClient, bundled_model_path: Path
) -> None:
    expected = await completion(lmsp, PATTERN)
    tokenizer = LlamaTokenizer(bundled_model_path)
    try:  # BOS and the text, and nothing else
        assert expected[0] == 1 + len(tokenizer.tokenize(PATTERN))
    finally:
        tokenizer.close()
    assert read(await response(lmsp, input=PATTERN)) == expected
    message = [{"role": "user", "content": PATTERN}]
    assert read(await response(lmsp, input=message)) == expected
    body = {"model": MODEL, "messages": message, "max_tokens": 12, "temperature": 0}
    chat = (await lmsp.post("/chat/completions", json=body)).json()
    assert (chat["usage"]["prompt_tokens"], chat["choices"][0]["message"]["content"]) == expected


async def test_several_turns_to_a_base_model_are_their_transcript(
    lmsp: httpx.AsyncClient,
) -> None:
    turns = [
        {"role": "user", "content": "Country: France -> Capital: Paris"},
        {"role": "assistant", "content": "\nCountry: Japan -> Capital: Tokyo"},
        {"role": "user", "content": "Country: Italy -> Capital:"},
    ]
    system = "Countries and their capitals."
    # The system text first; the answer goes on from its prompt; every other turn starts a line.
    expected = await completion(
        lmsp,
        "Countries and their capitals.\n"
        "Country: France -> Capital: Paris\n"
        "Country: Japan -> Capital: Tokyo\n"
        "Country: Italy -> Capital:",
    )
    assert read(await response(lmsp, input=[{"role": "system", "content": system}, *turns])) == (
        expected
    )
    assert read(await response(lmsp, instructions=system, input=turns)) == expected


async def test_a_continued_answer_is_followed_by_the_new_text_and_its_prompt_is_cached(
    lmsp: httpx.AsyncClient,
) -> None:
    first = await response(lmsp, input=PATTERN, store=True)
    follow = "Country: Spain -> Capital:"
    second = await response(lmsp, input=follow, previous_response_id=first["id"])
    cached = second["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= first["usage"]["input_tokens"]
    transcript = f"{PATTERN}{message_text(first)}"
    transcript += follow if transcript.endswith("\n") else f"\n{follow}"
    assert read(second) == await completion(lmsp, transcript)


async def test_a_chat_model_gets_its_template(
    lmsp: httpx.AsyncClient, chat_model_path: Path
) -> None:
    tokenizer = LlamaTokenizer(chat_model_path)
    try:
        template = ChatTemplate(GEMMA_TEMPLATE, bos_token="<bos>", eos_token="<eos>")
        hi = [ChatMessage("user", "Hi")]
        expected = tokenizer.tokenize(template.render(hi))
    finally:
        tokenizer.close()
    answer = await response(lmsp, 2, model=CHAT_MODEL, input="Hi")
    assert answer["usage"]["input_tokens"] == len(expected) == 10
    completed = await lmsp.post(
        "/completions", json={"model": CHAT_MODEL, "prompt": "Hi", "max_tokens": 1}
    )
    assert completed.json()["usage"]["prompt_tokens"] == 2


@pytest.mark.parametrize("chat_templates", [{CHAT_MODEL: ""}])
async def test_a_setting_makes_a_chat_model_a_base_model(lmsp: httpx.AsyncClient) -> None:
    model = (await lmsp.get(f"/models/{CHAT_MODEL}")).json()
    assert model["extensions"]["x-lmsp-jupyter"]["kind"] == "base"
    answer = await response(lmsp, 1, model=CHAT_MODEL, input="Hi")
    assert answer["usage"]["input_tokens"] == 2
