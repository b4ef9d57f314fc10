"""A chat template in Gemma's turn format, for the tests that need a chat model: the bundled
Gemma 3 270M base GGUF has none, and the service invents none (``chat_model_path`` in
``tests/conftest.py`` is the bundled model with this one in its metadata)."""

from __future__ import annotations

# Whitespace control (``-``) is used only where no newline of the format sits beside a tag.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0].role == 'system' %}"
    "{% set prefix = messages[0].content + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{{ prefix if loop.first else '' }}{{ m.content | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
