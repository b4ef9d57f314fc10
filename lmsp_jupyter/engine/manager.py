"""Which models are in memory: loaded on demand, unloaded when idle or to make room.

A model is *in use* while a sequence runs or waits on it (:meth:`ModelManager.use`); a model
in use is never unloaded. Before a model loads, its footprint (the engine's estimate: weights
and KV cache) must fit the memory budget and the count of loaded models; idle models are
unloaded to make room, least recently used first, and when even that is not enough the
request is refused with ``503 overloaded``. A model idle for its keep-alive is unloaded.

A model may be in memory in two roles: loaded by the engine to generate, and loaded by the
embedders to embed (an embedding GGUF, or a generative model named in
``LmspApp.embedding_models``). Each role is a resident of its own, counted in the same budget
and kept alive by the same rules; the listing shows a model's residents together.

Everything here runs on the server's event loop; the engine loads and frees models on their
own worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from traitlets import Float, Int, default
from traitlets.config import LoggingConfigurable

from ..protocol.errors import LmspError
from .backend import GenerationBackend
from .catalog import ModelEntry
from .memory import physical_memory, resident_bytes

#: The share of physical RAM that loaded models may take by default.
DEFAULT_MEMORY_SHARE = 0.5
#: Seconds an idle model stays loaded by default (Ollama's ``keep_alive`` is 5 minutes too).
DEFAULT_KEEP_ALIVE_SECONDS = 300.0
#: Models loaded at once by default.
DEFAULT_MAX_LOADED_MODELS = 3
#: Seconds a client refused for lack of memory is told to wait: a running answer ends soon.
RETRY_AFTER_SECONDS = 5

Residency = Literal["loading", "loaded", "unloading"]
#: What a model is loaded for: generating (by the engine) or embedding (by the embedders).
Role = Literal["generation", "embedding"]


@dataclass(frozen=True)
class ModelState:
    """A model in memory, as the listing shows it."""

    status: Literal["loading", "loaded"]
    memory_bytes: int
    loaded_at: int | None
    #: When it will be unloaded if it stays idle; ``None``: never.
    expires_at: int | None


class ModelLoader(Protocol):
    """What loads models in one role: the engine (generation), the embedders (embedding)."""

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes of memory ``entry`` takes once loaded."""
        ...

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry`` now."""
        ...

    async def unload(self, model_id: str) -> None:
        """Free what the model holds; called only while nothing uses it."""
        ...


class _Resident:
    """A model that is loading, loaded or being unloaded, in one role."""

    def __init__(
        self, entry: ModelEntry, role: Role, loader: ModelLoader, memory: int, keep_alive: float
    ) -> None:
        self.entry = entry
        self.role = role
        self.loader = loader
        self.memory = memory
        self.keep_alive = keep_alive
        self.status: Residency = "loading"
        self.loaded_at: float | None = None
        self.last_used = time.time()
        self.timer: asyncio.TimerHandle | None = None
        self.change: asyncio.Future[None] | None = None  # the load or unload under way

    @property
    def key(self) -> tuple[str, Role]:
        return self.entry.id, self.role

    def expires_at(self, busy: bool) -> float | None:
        if self.keep_alive < 0:
            return None
        return (time.time() if busy else self.last_used) + self.keep_alive


def default_memory_budget() -> int:
    """The memory budget of loaded models by default: a share of the machine's RAM."""
    return int(physical_memory() * DEFAULT_MEMORY_SHARE)


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


class ModelManager(LoggingConfigurable):
    """Loads models on demand and unloads them when idle or to make room for another.

    Its settings are its own traits (``ModelManager.keep_alive_seconds``, ...): the app builds
    it with ``parent=app``, so it reads them from the Jupyter config.
    """

    keep_alive_seconds = Float(
        DEFAULT_KEEP_ALIVE_SECONDS,
        help="Seconds a loaded model stays in memory with nothing running or waiting on it; "
        "0: unloaded as soon as it is idle; negative: never unloaded for being idle. A "
        'request may set it for its model with extensions["x-lmsp-jupyter"]'
        '["keep_alive_seconds"].',
    ).tag(config=True)

    max_loaded_models = Int(
        DEFAULT_MAX_LOADED_MODELS,
        help="Most models in memory at once; loading one more first unloads the least "
        "recently used idle model. 0: no limit.",
    ).tag(config=True)

    memory_budget_bytes = Int(
        help="Memory loaded models may take together, by their estimated footprint (weights "
        "plus KV cache for the context and its parallel sequences; llama.cpp's compute "
        "buffers come on top). Idle models are unloaded, least recently used first, to make "
        "room; a model that still does not fit is refused with 503 overloaded. Default: half "
        "of the machine's physical RAM. 0: no budget.",
    ).tag(config=True)

    @default("memory_budget_bytes")
    def _default_memory_budget(self) -> int:
        return default_memory_budget()

    def __init__(
        self,
        engine: GenerationBackend,
        *,
        embedders: ModelLoader | None = None,
        **kwargs: Any,
    ) -> None:
        """Manage the models ``engine`` runs and ``embedders`` embed with; ``kwargs`` are
        traits and ``parent``/``config``."""
        super().__init__(**kwargs)
        self.engine = engine
        self.embedders = embedders
        self._residents: dict[tuple[str, Role], _Resident] = {}
        self._users: Counter[tuple[str, Role]] = Counter()

    def _loader(self, role: Role) -> ModelLoader:
        if role == "generation":
            return self.engine
        if self.embedders is None:
            raise LmspError("unsupported_capability", "this service embeds nothing", param="model")
        return self.embedders

    # --- what the listing shows -------------------------------------------------------------

    def state(self, model_id: str) -> ModelState | None:
        """The model's state while it is in memory (loading, loaded or being unloaded), in
        every role together: loaded if loaded in one, its memory the sum, expiring with the
        last one to go."""
        residents = self._of(model_id)
        if not residents:
            return None
        expiries: list[float | None] = [
            time.time()  # unloading: still in memory, due now
            if resident.status == "unloading"
            else resident.expires_at(self._busy(resident))
            for resident in residents
        ]
        loaded = [r.loaded_at for r in residents if r.loaded_at is not None]
        expires = None if None in expiries else max(e for e in expiries if e is not None)
        return ModelState(
            status="loaded" if any(r.status != "loading" for r in residents) else "loading",
            memory_bytes=sum(r.memory for r in residents),
            loaded_at=int(min(loaded)) if loaded else None,
            expires_at=None if expires is None else int(expires),
        )

    def _of(self, model_id: str) -> list[_Resident]:
        """The model's residents, in every role."""
        return [r for r in self._residents.values() if r.entry.id == model_id]

    # --- using, loading, unloading ----------------------------------------------------------

    def check(self, entry: ModelEntry, role: Role = "generation") -> None:
        """Refuse now (``503 overloaded``) a model that could not be loaded even after
        unloading every idle model; loading it is left to :meth:`use`."""
        resident = self._residents.get((entry.id, role))
        if resident is None or resident.status == "unloading":
            self._room_for(entry, role, self._loader(role).footprint(entry))

    @contextlib.asynccontextmanager
    async def use(
        self, entry: ModelEntry, keep_alive: float | None = None, role: Role = "generation"
    ) -> AsyncIterator[None]:
        """Hold ``entry`` loaded in ``role`` for the duration: it is loaded first if need be
        (making room), and counts as in use until the block ends. ``keep_alive`` (seconds)
        replaces the default keep-alive of the model once it is idle again."""
        key = (entry.id, role)
        self._users[key] += 1
        try:
            await self._loaded(entry, role)
            yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
            resident = self._residents.get(key)
            if resident is not None and resident.status == "loaded":
                resident.last_used = time.time()
                resident.keep_alive = self.keep_alive_seconds if keep_alive is None else keep_alive
                self._schedule(resident)

    async def load(
        self, entry: ModelEntry, keep_alive: float | None = None, role: Role = "generation"
    ) -> None:
        """Load ``entry`` now (making room as :meth:`use` does); its keep-alive starts now."""
        async with self.use(entry, keep_alive, role):
            pass

    async def unload(self, model_id: str) -> None:
        """Unload a model now, in every role; one in use or loading → ``409 model_busy``.
        Not loaded: no-op."""
        residents = self._of(model_id)
        for resident in residents:
            if self._busy(resident):
                doing = "loading" if resident.status == "loading" else "in use"
                raise LmspError("model_busy", f"model {model_id!r} is {doing}")
        for resident in residents:
            await self._unload(resident)

    async def close(self) -> None:
        """Stop the idle timers and unload every idle model."""
        for resident in list(self._residents.values()):
            if resident.timer is not None:
                resident.timer.cancel()
            if not self._busy(resident):
                await self._unload(resident)

    # --- the rules --------------------------------------------------------------------------

    def _busy(self, resident: _Resident) -> bool:
        """In use: a sequence runs or waits on it, or it is loading."""
        return resident.status == "loading" or self._users[resident.key] > 0

    async def _loaded(self, entry: ModelEntry, role: Role) -> None:
        """Wait until ``entry`` is loaded in ``role``, loading it (after making room) if
        nobody else is."""
        while True:
            resident = self._residents.get((entry.id, role))
            if resident is None:
                loader = self._loader(role)
                memory = loader.footprint(entry)
                evictions = []
                for victim in self._room_for(entry, role, memory):
                    what = f"{victim.entry.id} ({victim.role})"
                    self.log.info("unloading idle model %s for %s", what, entry.id)
                    evictions.append(self._start_unload(victim))
                resident = _Resident(entry, role, loader, memory, self.keep_alive_seconds)
                self._residents[resident.key] = resident
                resident.change = _background(self._load(resident, evictions))
            if resident.status == "loaded":
                if resident.timer is not None:
                    resident.timer.cancel()
                    resident.timer = None
                return
            assert resident.change is not None
            await asyncio.shield(resident.change)  # a load fails here for every waiter

    def _room_for(self, entry: ModelEntry, role: Role, memory: int) -> list[_Resident]:
        """The idle models to unload, least recently used first, so that ``entry`` fits in
        ``role``; ``503 overloaded`` when it cannot fit even after unloading every idle one."""
        budget = self.memory_budget_bytes if self.memory_budget_bytes > 0 else None
        limit = self.max_loaded_models if self.max_loaded_models > 0 else None
        others = [r for r in self._residents.values() if r.key != (entry.id, role)]
        used, count = sum(r.memory for r in others), len(others)

        def fits() -> bool:
            return (budget is None or used + memory <= budget) and (
                limit is None or count + 1 <= limit
            )

        idle = sorted(
            (r for r in others if r.status == "loaded" and not self._busy(r)),
            key=lambda r: r.last_used,
        )
        victims: list[_Resident] = []
        for resident in idle:
            if fits():
                break
            victims.append(resident)
            used, count = used - resident.memory, count - 1
        if not fits():
            raise LmspError(
                "overloaded",
                self._overload_detail(entry, memory, others),
                retry_after=RETRY_AFTER_SECONDS,
            )
        return victims

    def _overload_detail(self, entry: ModelEntry, memory: int, others: list[_Resident]) -> str:
        loaded = (
            ", ".join(
                f"{r.entry.id!r} ({'embedding, ' if r.role == 'embedding' else ''}"
                f"{_mb(r.memory)}, {'in use' if self._busy(r) else r.status})"
                for r in others
            )
            or "none"
        )
        limits = []
        if self.memory_budget_bytes > 0:
            limits.append(f"memory budget {_mb(self.memory_budget_bytes)}")
        if self.max_loaded_models > 0:
            limits.append(f"at most {self.max_loaded_models} loaded models")
        return (
            f"model {entry.id!r} needs about {_mb(memory)} and does not fit "
            f"({', '.join(limits)}); loaded: {loaded}"
        )

    async def _load(self, resident: _Resident, evictions: list[asyncio.Future[None]]) -> None:
        entry = resident.entry
        try:
            for eviction in evictions:
                await eviction
            started = time.monotonic()
            await resident.loader.load(entry)
        except BaseException:
            del self._residents[resident.key]
            raise
        resident.status = "loaded"
        resident.loaded_at = resident.last_used = time.time()
        self.log.info(
            "loaded model %s (%s) in %.1f s (about %s)",
            entry.id,
            resident.role,
            time.monotonic() - started,
            _mb(resident.memory),
        )
        if not self._users[resident.key]:
            self._schedule(resident)

    def _schedule(self, resident: _Resident) -> None:
        """Start the idle countdown of a loaded model nobody uses."""
        if resident.timer is not None:
            resident.timer.cancel()
            resident.timer = None
        if self._users[resident.key] or resident.keep_alive < 0:
            return
        loop = asyncio.get_running_loop()
        resident.timer = loop.call_later(resident.keep_alive, self._expire, resident)

    def _expire(self, resident: _Resident) -> None:
        resident.timer = None
        current = self._residents.get(resident.key)
        if current is resident and resident.status == "loaded" and not self._busy(resident):
            self.log.info("model %s was idle for %g s", resident.entry.id, resident.keep_alive)
            self._start_unload(resident)

    async def _unload(self, resident: _Resident) -> None:
        await asyncio.shield(self._start_unload(resident))

    def _start_unload(self, resident: _Resident) -> asyncio.Future[None]:
        """Begin unloading a model (once); it stops counting as loaded for new requests."""
        if resident.status != "unloading" or resident.change is None:
            resident.status = "unloading"
            resident.change = _background(self._free(resident))
        return resident.change

    async def _free(self, resident: _Resident) -> None:
        if resident.timer is not None:
            resident.timer.cancel()
            resident.timer = None
        try:
            await resident.loader.unload(resident.entry.id)
        finally:
            if self._residents.get(resident.key) is resident:
                del self._residents[resident.key]
        self.log.info(
            "unloaded model %s (%s); the server process now holds %s",
            resident.entry.id,
            resident.role,
            _mb(resident_bytes()),
        )


def _background(work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
    """Run ``work`` as a task whose failure is reported to its waiters, never left unread."""
    task: asyncio.Task[None] = asyncio.ensure_future(work)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task
