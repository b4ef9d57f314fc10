"""The environment variables the server extension sets for the kernels it starts.

A contract between the server (which exports them once it listens) and the client and kernel
(which read them): the client's discovery reads the URL and token, the kernel's origin the root
directory, the ``%lmsp`` magic the default model.
"""

from __future__ import annotations

#: The LMSP root URL of the server that started the kernel (``…/lmsp/v1``).
URL_VARIABLE = "LMSP_URL"
#: The bearer token to send there.
TOKEN_VARIABLE = "LMSP_TOKEN"
#: The Jupyter server's root directory, so a kernel can name its notebook as the server does.
ROOT_VARIABLE = "LMSP_ROOT_DIR"
#: The server's default model (``LmspApp.default_model``): what ``%lmsp ask`` asks without
#: ``--model``.
MODEL_VARIABLE = "LMSP_MODEL"
#: Set by JupyterHub for every single-user server (``c.Spawner.environment``): the LMSP root
#: of the hub's LMSP service, reached with the user's own ``$JUPYTERHUB_API_TOKEN``.
HUB_URL_VARIABLE = "LMSP_HUB_SERVICE_URL"
#: The user's hub token, which JupyterHub sets in every single-user server.
HUB_TOKEN_VARIABLE = "JUPYTERHUB_API_TOKEN"
