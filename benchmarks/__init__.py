"""Benchmarks of the LMSP service, each a script: ``python benchmarks/<name>.py --help``.

They share one harness (:mod:`benchmarks.harness`): the server process, the ``/proc`` meters,
the package's own SSE parser, the raw llama-cpp-python side and the way a script ends.
"""
