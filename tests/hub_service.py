"""A real JupyterHub (the dummy authenticator, its configurable-http-proxy from npm) with the
LMSP service as a hub-managed service, for tests/server/test_jupyterhub.py and benchmarks/hub.py.

Users' tokens are made through the hub's API, with the scopes a spawned server's
``$JUPYTERHUB_API_TOKEN`` gets from ``c.Spawner.server_token_scopes`` (docs/jupyterhub.md).
Users' servers are spawned only when a test asks (:meth:`Hub.spawn`): real
``jupyterhub-singleuser`` processes of the hub's own system user (``SimpleLocalProcessSpawner``),
with ``$LMSP_HUB_SERVICE_URL`` set as the documented config sets it, so their LMSP routes
forward to the hub service.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lmsp_jupyter.server.hub import ADMIN_SCOPE
from tests.conftest import free_port
from tests.helpers import ROOT, eventually, install_js_clients, node_env

#: JupyterHub's proxy, installed from its lockfile.
HUB_JS = ROOT / "tests" / "compat" / "hub"
#: The scopes of a user's token, as docs/jupyterhub.md gives them to spawned servers (an
#: admin's has ``custom:lmsp:admin`` too).
USER_SCOPES = ["access:services!service=lmsp"]


def install_proxy() -> Path:
    """``npm ci`` configurable-http-proxy once; its command."""
    install_js_clients(HUB_JS)
    return HUB_JS / "node_modules" / ".bin" / "configurable-http-proxy"


@dataclass
class Hub:
    """A running hub: its public URL, the LMSP service's direct URL, and a token maker."""

    url: str
    service_url: str
    admin_token: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def lmsp(self) -> str:
        """The LMSP root through the hub's proxy."""
        return f"{self.url}/services/lmsp/lmsp/v1"

    def token(self, user: str, *, admin: bool = False, scopes: Sequence[str] = USER_SCOPES) -> str:
        """A new API token of ``user`` with ``scopes`` (default: those a spawned server's
        token has; ``admin``: and the LMSP admin scope)."""
        reply = self._api(
            "POST",
            f"/users/{user}/tokens",
            json={"scopes": [*scopes, *([ADMIN_SCOPE] if admin else [])], "note": "test"},
        )
        token: str = reply.json()["token"]
        return token

    def spawn(self, user: str) -> str:
        """Start ``user``'s server and wait until the hub says it is ready; its URL."""
        self._api("POST", f"/users/{user}/server")

        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(self.log.read_text())
            server = self._api("GET", f"/users/{user}").json()["servers"].get("")
            return bool(server and server["ready"])

        eventually(ready, within=180, interval=0.5, what=f"{user}'s server ready")
        return f"{self.url}/user/{user}/"

    def stop(self, user: str) -> None:
        """Stop ``user``'s server (the hub waits for its process to end)."""
        reply = self._api("DELETE", f"/users/{user}/server")

        def stopped() -> bool:
            return not self._api("GET", f"/users/{user}").json()["servers"]

        if reply.status_code == 202:
            eventually(stopped, within=60, interval=0.5, what=f"{user}'s server stopped")

    def _api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        reply = httpx.request(
            method,
            f"{self.url}/hub/api{path}",
            headers={"Authorization": f"token {self.admin_token}"},
            timeout=30,
            **kwargs,
        )
        reply.raise_for_status()
        return reply


def hub_config(
    tmp: Path,
    users: Sequence[str],
    admins: Sequence[str],
    service_args: Sequence[str],
    singleuser_args: Sequence[str] = (),
) -> tuple[str, str, str, str, list[str]]:
    """Write ``jupyterhub_config.py`` for ``tmp``: its public URL, the service's URL, the
    admin service's token, the proxy's token and the proxy's command. ``singleuser_args`` are
    added to users' servers' command."""
    port, service_port, hub_port, api_port = (free_port() for _ in range(4))
    admin_token, proxy_token = secrets.token_hex(16), secrets.token_hex(16)
    service_url = f"http://127.0.0.1:{service_port}"
    command = [
        str(Path(sys.executable).with_name("jupyter-lmsp")),
        "--hub-service",
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
        f"--TaskStore.store_path={tmp / 'lmsp.sqlite3'}",
        f"--ServerApp.root_dir={tmp}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
        *service_args,
    ]
    config = f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.should_start = False  # started (and stopped) by the test harness
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}
c.JupyterHub.db_url = "sqlite:///{tmp / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(users)!r}
c.Authenticator.admin_users = {set(admins)!r}
c.JupyterHub.custom_scopes = {{
    "custom:lmsp:admin": {{"description": "Read every user's LMSP tasks, responses and usage"}},
}}
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service=lmsp"]}},
    {{"name": "lmsp-admin", "scopes": ["custom:lmsp:admin"], "users": {list(admins)!r}}},
    {{
        "name": "test-admin",
        "scopes": ["admin:users", "admin:servers", "tokens"],
        "services": ["test-admin"],
    }},
]
c.JupyterHub.services = [
    {{"name": "test-admin", "api_token": {admin_token!r}}},
    {{
        "name": "lmsp",
        "url": {service_url!r},
        "command": {command!r},
        "oauth_no_confirm": True,
    }},
]
"""
    config += spawner_config(tmp, f"http://127.0.0.1:{port}", singleuser_args)
    (tmp / "jupyterhub_config.py").write_text(config)
    proxy = [
        str(install_proxy()),
        "--ip=127.0.0.1",
        f"--port={port}",
        "--api-ip=127.0.0.1",
        f"--api-port={api_port}",
        f"--default-target=http://127.0.0.1:{hub_port}",
        f"--error-target=http://127.0.0.1:{hub_port}/hub/error",
    ]
    return f"http://127.0.0.1:{port}", service_url, admin_token, proxy_token, proxy


def spawner_config(tmp: Path, url: str, singleuser_args: Sequence[str] = ()) -> str:
    """The spawner part of the config: users' servers as processes of this system user, each
    with a home under ``tmp``, finding the LMSP service as docs/jupyterhub.md sets it up."""
    singleuser = [
        str(Path(sys.executable).with_name("jupyterhub-singleuser")),
        *(["--allow-root"] if os.geteuid() == 0 else []),
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
        *singleuser_args,
    ]
    scopes = [
        "access:servers!server",
        "users:activity!user",
        "access:services!service=lmsp",
        ADMIN_SCOPE,
    ]
    return f"""
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / "home" / "{username}")!r}
c.Spawner.cmd = {singleuser!r}
c.Spawner.environment = {{"LMSP_HUB_SERVICE_URL": "{url}/services/lmsp/lmsp/v1"}}
c.Spawner.server_token_scopes = {scopes!r}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
"""


@contextlib.contextmanager
def running_hub(
    tmp: Path,
    users: Sequence[str],
    admins: Sequence[str] = (),
    service_args: Sequence[str] = (),
    singleuser_args: Sequence[str] = (),
) -> Iterator[Hub]:
    """JupyterHub with the LMSP service, until the block ends (then stopped, with its
    service and proxy); ``singleuser_args`` are added to users' servers' command."""
    tmp.mkdir(parents=True, exist_ok=True)
    url, service_url, admin_token, proxy_token, proxy = hub_config(
        tmp, users, admins, service_args, singleuser_args
    )
    log = tmp / "hub.log"
    env = {**node_env(), "JUPYTER_DATA_DIR": str(tmp / "data")}
    with log.open("wb") as out:
        proxy_process = subprocess.Popen(
            proxy,
            env={**env, "CONFIGPROXY_AUTH_TOKEN": proxy_token},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the venv's node is a wrapper: its child is the proxy
        )
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("jupyterhub")), "-f", "jupyterhub_config.py"],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    hub = Hub(url, service_url, admin_token, process, log)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(log.read_text())
        with contextlib.suppress(httpx.TransportError):
            reply = httpx.get(f"{hub.lmsp}/", timeout=5)
            return reply.status_code == 401  # the service is there and asks for a token
        return False

    try:
        eventually(answers, within=120, interval=0.5, what="the hub's LMSP service answering")
        yield hub
    finally:
        process.terminate()
        # A hub slow to stop on a busy machine is killed, not reported: its stop is not tested.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        # The service too, if the hub left it running; then the proxy.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proxy_process.pid, 15)
        proxy_process.wait()


def problem_code(reply: httpx.Response) -> object:
    """The LMSP code of a problem reply."""
    return json.loads(reply.text).get("code")
