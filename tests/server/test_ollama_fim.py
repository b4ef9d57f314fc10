"""Fill-in-the-middle through Ollama's ``/api/generate`` (``suffix``), with the ``ollama``
Python library unmodified, on a copy of the bundled model whose GGUF names FIM tokens (in the
server process, as in ``test_completions``): ``insert`` in ``/api/show``, and the prompt
assembled prefix-suffix-middle, counted against the same assembly of the model's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import ollama
import pytest
from traitlets.config import Config

from tests.compat.test_ollama_python import CODE, GREEDY, SUFFIX
from tests.conftest import MODEL
from tests.server.helpers import fim_prompt_lengths, server_config
from tests.server.test_ollama_stream import ollama_url

#: The FIM copy's id: its file name in its model directory.
FIM_MODEL = "model"


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, fim_model_path: Path) -> Config:
    """The in-process server, with the FIM copy of the bundled model in a model directory."""
    return server_config(request, model_dirs=[str(fim_model_path.parent)])


def ollama_client(lmsp: httpx.AsyncClient) -> ollama.AsyncClient:
    """``ollama.AsyncClient`` pointed at the in-process server's Ollama API."""
    return ollama.AsyncClient(host=ollama_url(lmsp, ""), headers=dict(lmsp.headers))


async def test_insert_is_shown_for_a_model_with_fim_tokens_only(lmsp: httpx.AsyncClient) -> None:
    async with ollama_client(lmsp) as client:
        assert "insert" in ((await client.show(FIM_MODEL)).capabilities or [])
        assert "insert" not in ((await client.show(MODEL)).capabilities or [])


async def test_a_suffix_fills_in_the_middle(lmsp: httpx.AsyncClient, fim_model_path: Path) -> None:
    filled_length, prefix_length = fim_prompt_lengths(fim_model_path, CODE, SUFFIX)
    async with ollama_client(lmsp) as client:
        filled = await client.generate(FIM_MODEL, CODE, suffix=SUFFIX, options=GREEDY)
        continued = await client.generate(FIM_MODEL, CODE, raw=True, options=GREEDY)
        stream = await client.generate(FIM_MODEL, CODE, suffix=SUFFIX, options=GREEDY, stream=True)
        chunks = [chunk async for chunk in stream]
    assert filled.prompt_eval_count == filled_length
    assert continued.prompt_eval_count == prefix_length
    assert "".join(chunk.response or "" for chunk in chunks) == filled.response
    assert chunks[-1].prompt_eval_count == filled_length
