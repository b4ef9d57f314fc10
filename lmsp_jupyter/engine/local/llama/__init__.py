"""The only code that touches llama_cpp, by room: the process-wide set-up and runtime
(:mod:`.runtime`), tokenizers (:mod:`.tokenizer`), models loaded for batched generation
(:mod:`.model`) and their samplers (:mod:`.sampler`), and models loaded to embed
(:mod:`.embedder`)."""
