"""engine/local/: the llama.cpp engine, which runs models in this process."""
