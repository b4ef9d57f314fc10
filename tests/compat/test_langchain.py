"""LangChain's ``ChatOpenAI`` against the live server and the bundled model (section 11.3).

Shapes and validity only: the bundled model is a small base model.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.conftest import MODEL, LiveServer


class Verdict(BaseModel):
    """Whether it is sunny."""

    sunny: bool


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "Sunny."


def chat(live_server: LiveServer, max_tokens: int = 8) -> ChatOpenAI:
    """``ChatOpenAI`` pointed at the Jupyter port."""
    return ChatOpenAI(
        base_url=live_server.lmsp,
        api_key=live_server.token,
        model=MODEL,
        temperature=0,
        max_completion_tokens=max_tokens,
        max_retries=0,
    )


def assert_cut_at_eight(answer: BaseMessage, reason: str) -> None:
    """``answer`` is an AI message of text cut at its limit of 8 tokens, as its metadata's
    ``reason`` says (each integration names the finish reason its way)."""
    assert isinstance(answer, AIMessage)
    assert isinstance(answer.content, str) and answer.content != ""
    assert answer.response_metadata[reason] == "length"
    assert answer.usage_metadata is not None
    assert answer.usage_metadata["output_tokens"] == 8


def test_invoke(live_server: LiveServer) -> None:
    assert_cut_at_eight(chat(live_server).invoke("The sky is"), "finish_reason")


def test_stream(live_server: LiveServer) -> None:
    chunks = list(chat(live_server).stream("The sky is"))
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    assert "".join(str(chunk.content) for chunk in chunks) != ""


def test_with_structured_output(live_server: LiveServer) -> None:
    verdict = chat(live_server, 40).with_structured_output(Verdict).invoke("Is the sky blue?")
    assert isinstance(verdict, Verdict)


def test_bind_tools_with_a_forced_call(live_server: LiveServer) -> None:
    model = chat(live_server, 40).bind_tools([get_weather], tool_choice="get_weather")
    answer = model.invoke("What is the weather in Paris?")
    assert isinstance(answer, AIMessage)
    (call,) = answer.tool_calls
    assert call["name"] == "get_weather"
    assert isinstance(call["args"]["city"], str)
    assert call["id"] is not None and call["id"].startswith("call_")
