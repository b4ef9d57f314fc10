"""``python -m benchmarks.harness.llama_cpp_server ARGS``: llama-cpp-python's own OpenAI-compatible
server (``python -m llama_cpp.server ARGS``), loading its model as the service does.

Weight repacking crashes llama.cpp's decode on CPUs with AMX (see ``no_weight_repacking``); this
is the counterpart of llama-server's ``--no-repack``. The server itself is unchanged.
"""

import runpy

from lmsp_jupyter.engine.local.llama.runtime import no_weight_repacking

#: The command prefix that starts it, before the server's own arguments.
MODULE = "benchmarks.harness.llama_cpp_server"

if __name__ == "__main__":
    with no_weight_repacking():
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
