"""``/proc`` meters: CPU time of processes and of the machine, resident memory and its peak.

On a shared machine another workload slows whichever run it overlaps, so every benchmark
records what other processes took meanwhile (busy and stolen time of the whole machine minus
that of the processes measured and of the benchmark itself). Where there is no ``/proc`` the
readers return 0.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from .figures import Sample

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
S = TypeVar("S", bound=Sample)


def proc_status_kb(pid: int, key: str) -> int:
    """One ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``); 0 if unreadable."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` to the current RSS (``clear_refs`` 5); False where that is refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (llama.cpp's included)."""
    return _stat_cpu_s(Path(f"/proc/{pid}/stat"))


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds of a process's main thread: a server's event loop (tornado/asyncio)."""
    return _stat_cpu_s(Path(f"/proc/{pid}/task/{pid}/stat"))


def _stat_cpu_s(path: Path) -> float:
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy, stolen time included (``/proc/stat``)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def own_cpu_s() -> float:
    """User + system CPU seconds of this benchmark process."""
    times = os.times()
    return times.user + times.system


class CpuMeter:
    """CPU time over one phase: ``with CpuMeter(server_pid, ...) as cpu: ...``.

    After the block: ``processes_s`` (the given processes, all threads), ``own_s`` (this
    process), ``others_s`` (every other process on the machine), ``wall_s``, and
    :attr:`background`, the share of the machine other processes took.
    """

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.processes_s = self.own_s = self.others_s = self.wall_s = 0.0
        self._start = (0.0, 0.0, 0.0, 0.0)

    def _counters(self) -> tuple[float, float, float, float]:
        processes = sum(process_cpu_s(pid) for pid in self.pids)
        return machine_busy_s(), processes, own_cpu_s(), time.perf_counter()

    def __enter__(self) -> CpuMeter:
        self._start = self._counters()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, self.processes_s, self.own_s, self.wall_s = (
            end - start for start, end in zip(self._start, self._counters(), strict=True)
        )
        self.others_s = max(busy - self.processes_s - self.own_s, 0.0)

    @property
    def background(self) -> float:
        """CPU other processes took, as a share of the whole machine (all its CPUs)."""
        return share_of_machine(self.others_s, self.wall_s)


def measured(run: Callable[[], S], *pids: int) -> S:
    """``run()``'s sample with the share of the machine other processes took meanwhile: not
    this one, not ``pids`` (the server's, a kernel's)."""
    with CpuMeter(*pids) as cpu:
        sample = run()
    return replace(sample, background=cpu.background)


def share_of_machine(cpu_s: float, wall_s: float) -> float:
    """``cpu_s`` CPU seconds over ``wall_s`` seconds, as a share of all the machine's CPUs."""
    return cpu_s / (wall_s * (os.cpu_count() or 1)) if wall_s > 0 else 0.0


class RssSampler:
    """Samples a process's ``VmRSS`` on a thread, to see the peak of one phase."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, proc_status_kb(self.pid, "VmRSS"))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class PhaseCost:
    """What one phase cost: a server's memory and CPU, the client's CPU, other processes'."""

    rss_before_kb: int = 0
    rss_peak_kb: int = 0
    hwm_kb: int = 0
    hwm_reset: bool = False
    rss_after_kb: int = 0
    server_cpu_s: float = 0.0
    loop_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    others_cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def background(self) -> float:
        """CPU other processes took, as a share of the whole machine (all its CPUs)."""
        return share_of_machine(self.others_cpu_s, self.wall_s)


class PhaseMeter:
    """Memory and CPU of a server over one phase: ``with PhaseMeter(pid) as meter: ...``, then
    ``meter.usage``. RSS is sampled every 20 ms on a thread and ``VmHWM`` reset first."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.usage = PhaseCost()
        self._cpu = CpuMeter(pid)
        self._sampler = RssSampler(pid)
        self._loop_start = 0.0

    def __enter__(self) -> PhaseMeter:
        self.usage.hwm_reset = reset_peak_rss(self.pid)
        self.usage.rss_before_kb = proc_status_kb(self.pid, "VmRSS")
        self._loop_start = main_thread_cpu_s(self.pid)
        self._cpu.__enter__()
        self._sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.__exit__()
        self._cpu.__exit__()
        usage, cpu = self.usage, self._cpu
        usage.loop_cpu_s = main_thread_cpu_s(self.pid) - self._loop_start
        usage.rss_peak_kb = self._sampler.peak_kb
        usage.hwm_kb = proc_status_kb(self.pid, "VmHWM")
        usage.rss_after_kb = proc_status_kb(self.pid, "VmRSS")
        usage.server_cpu_s, usage.client_cpu_s = cpu.processes_s, cpu.own_s
        usage.others_cpu_s, usage.wall_s = cpu.others_s, cpu.wall_s
