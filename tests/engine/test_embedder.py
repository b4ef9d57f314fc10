"""The embedder of a generative model (``engine.local.llama.embedder.LlamaEmbedder`` with a pooling
named, as ``LmspApp.embedding_models`` names it), on the real bundled model: each pass ends at
the tokens' last states, before the output layer, and the vectors are those of the whole
graph, pooled as llama.cpp pools them."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from lmsp_jupyter.engine.embedding import EMBEDDING_WINDOW
from lmsp_jupyter.engine.generation import ModelLoadError
from lmsp_jupyter.engine.local.llama.embedder import LlamaEmbedder
from lmsp_jupyter.engine.local.llama.runtime import no_weight_repacking, use_reference_kernels

TEXTS = [
    "The cat sat on the mat.",
    "Stock prices fell sharply today, and the central bank said it would wait.",
    "def add(a, b):\n    return a + b\n" * 6,
]


def cosine(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


@pytest.fixture(scope="module")
def reference(bundled_model_path: Path) -> dict[str, list[list[float]]]:
    """llama-cpp-python's own ``Llama.embed`` of TEXTS, llama.cpp pooling each way."""
    vectors = {}
    for name, pooling in [
        ("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN),
        ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST),
    ]:
        with no_weight_repacking():
            llama = llama_cpp.Llama(
                str(bundled_model_path),
                embedding=True,
                pooling_type=pooling,
                n_ctx=EMBEDDING_WINDOW,
                n_batch=EMBEDDING_WINDOW,
                n_threads=2,
                verbose=False,
            )
        use_reference_kernels(llama._ctx.ctx)  # as the engine's embedder computes
        try:
            vectors[name] = [llama.embed(text, normalize=True) for text in TEXTS]
        finally:
            llama.close()
    return vectors


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_passes_end_before_the_output_layer_and_keep_the_vectors(
    bundled_model_path: Path, reference: dict[str, list[list[float]]], pooling: str
) -> None:
    embedder = LlamaEmbedder(bundled_model_path, pooling, EMBEDDING_WINDOW, 2)
    try:
        assert embedder._cut.cuts  # a generative model: its output layer follows the states
        cut = [embedder.embed([text])[0][0] for text in TEXTS]
        embedder._cut.cuts = False  # the whole graph, logits and all
        whole = [embedder.embed([text])[0][0] for text in TEXTS]
    finally:
        embedder.close()
    assert cut == whole  # the same states: the cut only leaves the logits out
    # pooled as llama.cpp pools (measured: cosine 1 - 6e-15 at worst; a graph with other
    # states, say flash attention's, gives 0.9999 on these texts)
    assert all(cosine(a, b) >= 0.9999999 for a, b in zip(cut, reference[pooling], strict=True))
    assert cosine(cut[0], cut[1]) < 0.99  # and different texts stay apart


def test_an_unknown_pooling_is_refused(bundled_model_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="pooling"):
        LlamaEmbedder(bundled_model_path, "max", EMBEDDING_WINDOW, 2)
