"""The models as LMSP lists them: what each one is."""

from __future__ import annotations

from pathlib import Path

from tests.engine.gguf_files import write_gguf
from tests.service.test_embedding_models import directory


def test_the_listing_says_each_generative_models_kind(tmp_path: Path) -> None:
    write_gguf(
        tmp_path / "chat.gguf",
        {"general.architecture": "llama", "tokenizer.chat_template": "{{ messages }}"},
    )
    listed = directory(tmp_path).list().model_dump(mode="json")["data"]
    kinds = {m["id"]: m.get("extensions", {}).get("x-lmsp-jupyter", {}) for m in listed}
    assert kinds == {"bge": {}, "chat": {"kind": "chat"}, "tiny": {"kind": "base"}}
