"""engine/: models and tokens — the only layer that touches llama.cpp."""
