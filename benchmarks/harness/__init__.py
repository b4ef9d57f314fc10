"""What every benchmark shares, so that each rule of measuring is written once.

* :mod:`.server`: ``jupyter lmsp`` (or ``jupyter server``) as a subprocess on a free port,
  ready when ``GET /lmsp/v1`` answers, always stopped;
* :mod:`.meters`: ``/proc`` readers: CPU time of processes and of the whole machine (what other
  processes took meanwhile), resident memory and its peak;
* :mod:`.sse`: event streams read with the package's own parser
  (:class:`lmsp_jupyter.client.SseParser`);
* :mod:`.raw`: the bundled model in this process through llama-cpp-python, with the service's
  default settings and its rendering of the prompt: the side the service is compared with;
* :mod:`.llama_server`: llama.cpp's ``llama-server`` on the same GGUF, loaded as the service
  loads it, always stopped: the third-party side several benchmarks compare with;
* :mod:`.figures`: one timed generation (:class:`Sample`), medians and spreads;
* :mod:`.cli`: a benchmark script's command line, and how it ends: exit codes, signals, the
  server's log on failure.

Each benchmark imports what it uses from these modules.
"""
