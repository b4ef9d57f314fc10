"""engine/: models and tokens — the only layer that touches llama.cpp.

``local/`` is the llama.cpp engine (:class:`~lmsp_jupyter.engine.local.engine.LocalEngine`),
``remote/`` the engine of OpenAI-compatible servers
(:class:`~lmsp_jupyter.engine.remote.engine.RemoteEngine`); what both use is here: the backend
protocol, the router, the model manager, the catalog, chat templates, schema guidance.
"""
