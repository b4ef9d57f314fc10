"""engine/: models and tokens — the only layer that touches llama.cpp.

``local/`` is the llama.cpp engine (:class:`~lmsp_jupyter.engine.local.engine.LocalEngine`),
``remote/`` the engine of OpenAI-compatible servers
(:class:`~lmsp_jupyter.engine.remote.engine.RemoteEngine`); what both use is here: the backend
protocol, the router, the model manager, the catalog, chat templates, schema guidance.
"""

from .._moved import keep_old_paths

#: The modules' paths before engine/local/ and engine/remote/; importable until the next release.
keep_old_paths(
    {
        f"lmsp_jupyter.engine.{old}": f"lmsp_jupyter.engine.{new}"
        for old, new in {
            "scheduler": "local.engine",
            "batching": "local.batching",
            "llama": "local.llama",
            "logits": "local.logits",
            "passes": "local.passes",
            "speculation": "local.speculation",
            "stops": "local.stops",
            "work": "local.worker_inputs",
            "remote_server": "remote.server",
            "remote_stream": "remote.stream",
            "remote_tokens": "remote.tokens",
        }.items()
    }
)
