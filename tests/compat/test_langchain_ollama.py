"""LangChain's ``ChatOllama`` against Ollama's API on the Jupyter port and the bundled model.

Shapes and validity only: the bundled model is a small base model.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_ollama import ChatOllama

from tests.compat.test_langchain import Verdict, assert_cut_at_eight, get_weather
from tests.conftest import MODEL, LiveServer


def chat(live_server: LiveServer, num_predict: int = 8) -> ChatOllama:
    """``ChatOllama`` pointed at the Jupyter port's Ollama API, with the Jupyter token."""
    return ChatOllama(
        base_url=f"{live_server.root}lmsp/ollama",
        client_kwargs={"headers": {"Authorization": f"Bearer {live_server.token}"}},
        model=MODEL,
        temperature=0,
        num_predict=num_predict,
        validate_model_on_init=True,  # asks /api/show (or /api/tags) for the model first
    )


def test_invoke(live_server: LiveServer) -> None:
    assert_cut_at_eight(chat(live_server).invoke("The sky is"), "done_reason")


def test_stream_agrees_with_invoke(live_server: LiveServer) -> None:
    model = chat(live_server)
    chunks = list(model.stream("The sky is"))
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    assert "".join(str(chunk.content) for chunk in chunks) == model.invoke("The sky is").content


def test_with_structured_output(live_server: LiveServer) -> None:
    verdict = chat(live_server, 40).with_structured_output(Verdict).invoke("Is the sky blue?")
    assert isinstance(verdict, Verdict)


def test_bind_tools(live_server: LiveServer) -> None:
    answer = chat(live_server, 48).bind_tools([get_weather]).invoke("Weather in Paris?")
    assert isinstance(answer, AIMessage)
    for call in answer.tool_calls:
        assert call["name"] == "get_weather"
        assert isinstance(call["args"], dict)
