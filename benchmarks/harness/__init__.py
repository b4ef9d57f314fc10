"""What every benchmark shares, so that each rule of measuring is written once.

* :mod:`.server`: ``jupyter lmsp`` (or ``jupyter server``) as a subprocess on a free port,
  ready when ``GET /lmsp/v1`` answers, always stopped;
* :mod:`.meters`: ``/proc`` readers: CPU time of processes and of the whole machine (what other
  processes took meanwhile), resident memory and its peak;
* :mod:`.sse`: event streams read with the package's own parser
  (:class:`lmsp_jupyter.client.SseParser`);
* :mod:`.raw`: the bundled model in this process through llama-cpp-python, with the service's
  default settings and its rendering of the prompt: the side the service is compared with;
* :mod:`.figures`: one timed generation (:class:`Sample`), medians and spreads;
* :mod:`.cli`: how a benchmark script ends: exit codes, signals, the server's log on failure.
"""

from .cli import run_benchmark
from .figures import Sample, median, num, spread
from .meters import CpuMeter, PhaseCost, PhaseMeter, RssSampler, measured
from .raw import DEFAULT_PROMPT, RawRunner, Settings, print_context, render_prompt
from .server import Server, free_port, running_process, running_server
from .sse import aiter_events, iter_events, parse_events

__all__ = [
    "DEFAULT_PROMPT",
    "CpuMeter",
    "PhaseCost",
    "PhaseMeter",
    "RawRunner",
    "RssSampler",
    "Sample",
    "Server",
    "Settings",
    "aiter_events",
    "free_port",
    "iter_events",
    "measured",
    "median",
    "num",
    "parse_events",
    "print_context",
    "render_prompt",
    "run_benchmark",
    "running_process",
    "running_server",
    "spread",
]
