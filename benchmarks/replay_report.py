"""The tables ``replay.py`` prints: the stored replay, the live runs, their resources."""

from __future__ import annotations

import pstats
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.figures import median, num
from benchmarks.harness.meters import PhaseCost
from benchmarks.replay_live import LiveRun
from benchmarks.replay_stored import MB, ReplayRun, StoredTask
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID


def mb(kb: int) -> str:
    """kB as MiB with one decimal."""
    return f"{kb / 1024:.1f}"


def print_replay(stored: StoredTask, runs: list[ReplayRun], usage: PhaseCost) -> None:
    """The stored replay table."""
    rates = [run.events_per_s for run in runs]
    total = sum(len(run.events) for run in runs)
    print(
        f"\nstored replay: {len(stored.events)} events, {runs[0].size / MB:.2f} MB of SSE, "
        f"{len(runs)} runs (store filled in {stored.fill_s:.1f} s)"
    )
    print(
        f"  events/s   median {median(runs, lambda r: r.events_per_s):8.0f}   min {min(rates):8.0f}"
        f"   max {max(rates):8.0f}"
    )
    print(f"  MB/s       median {median(runs, lambda r: r.mb_per_s):8.2f}")
    print(f"  first byte median {median(runs, lambda r: r.first_byte_s) * 1000:8.1f} ms")
    print(
        f"  server RSS {mb(usage.rss_before_kb)} -> peak {mb(usage.rss_peak_kb)} "
        f"(VmHWM {mb(usage.hwm_kb)}{'' if usage.hwm_reset else ', not reset'}) "
        f"-> {mb(usage.rss_after_kb)} MiB"
    )
    print(
        f"  CPU over {usage.wall_s:.2f} s: server {usage.server_cpu_s:.2f} s (event loop "
        f"{usage.loop_cpu_s:.2f} s = {usage.loop_cpu_s / total * 1e6:.0f} us/event), "
        f"client {usage.client_cpu_s:.2f} s, other processes {usage.others_cpu_s:.2f} s"
    )


def rates(run: LiveRun) -> tuple[float, float]:
    """(tokens/s creation to final event, decode tokens/s first delta to final) of a run."""
    e2e = run.output_tokens / run.end_s if run.end_s else float("nan")
    firsts = [t for f in run.followed if (t := f.time_of("response.output_text.delta"))]
    if not firsts or run.output_tokens < 2:
        return e2e, float("nan")
    return e2e, (run.output_tokens - 1) / (run.end_s - min(firsts))


def fan_out_ms(run: LiveRun) -> float:
    """How long after the first follower the last one connected by then got the final event."""
    finals = [f.times[-1] for f in run.followed if f.times and f.joined_s < run.end_s]
    return (max(finals) - run.end_s) * 1000 if finals else float("nan")


def by_count(runs: Sequence[LiveRun]) -> dict[int, list[LiveRun]]:
    """The runs grouped by their number of followers, in increasing order."""
    groups: dict[int, list[LiveRun]] = {}
    for run in sorted(runs, key=lambda r: r.followers):
        groups.setdefault(run.followers, []).append(run)
    return groups


def progress_line(run: LiveRun) -> str:
    """One run as it ends."""
    e2e, decode = rates(run)
    return (
        f"{run.followers:>3} followers: {run.ok}/{len(run.followed)} ok, "
        f"{run.output_tokens} tokens, final after {run.end_s:5.2f} s, {e2e:5.1f} tok/s "
        f"(decode {num(decode, '5.1f')}), "
        f"other processes {run.usage.background:4.0%} of the CPUs"
    )


def print_live(runs: list[LiveRun]) -> None:
    """The live fan-out tables (medians over the rounds): timing, then resources."""
    groups = by_count(runs)
    base = median(groups[0], lambda r: rates(r)[0])
    rounds = len(groups[0])
    print(f"\nlive task ({BUNDLED_MODEL_ID}), median of {rounds} round(s)")
    print(
        f"{'followers':>9} {'all ok':>8} {'tokens':>6} {'final s':>8} {'tok/s':>7} {'vs 0':>6}"
        f" {'decode':>7} {'fan-out ms':>10} {'others':>7}"
    )
    for count, group in groups.items():
        ok = f"{sum(r.ok for r in group)}/{sum(len(r.followed) for r in group)}"
        e2e = median(group, lambda r: rates(r)[0])
        print(
            f"{count if count else '0*':>9} {ok:>8}"
            f" {median(group, lambda r: r.output_tokens):>6.0f}"
            f" {median(group, lambda r: r.end_s):>8.2f} {e2e:>7.1f} {e2e / base:>6.3f}"
            f" {num(median(group, lambda r: rates(r)[1]), '.1f'):>7}"
            f" {num(median(group, fan_out_ms), '.0f'):>10}"
            f" {median(group, lambda r: r.usage.background):>7.0%}"
        )
    print("  tok/s = output tokens / (task creation to the final event at the first follower);")
    print("  decode = (tokens - 1) / (first delta to final event); fan-out = final event at the")
    print("  last follower minus at the first; others = other processes' share of the CPUs.")
    print("  * 0 followers: one watcher with ?after=<final id - 1> receives only the final event.")
    print_resources(groups)


def print_resources(groups: dict[int, list[LiveRun]]) -> None:
    """Server memory (worst round) and CPU (median) per follower count."""
    print(
        f"\n{'followers':>9} {'RSS before':>10} {'peak':>7} {'VmHWM':>7} {'after':>7}"
        f" {'growth':>7} {'srv CPU s':>9} {'loop CPU s':>10} {'cli CPU s':>9} {'wall s':>7}"
    )
    for count, group in groups.items():
        worst = max(group, key=lambda r: r.usage.rss_peak_kb - r.usage.rss_before_kb).usage
        print(
            f"{count if count else '0*':>9} {mb(worst.rss_before_kb):>10}"
            f" {mb(worst.rss_peak_kb):>7} {mb(worst.hwm_kb):>7} {mb(worst.rss_after_kb):>7}"
            f" {mb(worst.rss_peak_kb - worst.rss_before_kb):>7}"
            f" {median(group, lambda r: r.usage.server_cpu_s):>9.2f}"
            f" {median(group, lambda r: r.usage.loop_cpu_s):>10.2f}"
            f" {median(group, lambda r: r.usage.client_cpu_s):>9.2f}"
            f" {median(group, lambda r: r.usage.wall_s):>7.2f}"
        )
    print("  MiB, the round with the largest growth; RSS sampled every 20 ms, VmHWM reset")
    print("  before each run. CPU: medians; srv = all server threads (llama.cpp's included),")
    print("  loop = its event-loop thread, cli = this benchmark process.")


def print_joins(run: LiveRun) -> None:
    """Per join kind: followers, how many ok, joined while live, events received."""
    print(f"\nfollowers of the {run.followers}-follower run by how they joined:")
    for kind in ("none", "zero", "half", "header"):
        group = [f for f in run.followed if f.plan.cursor == kind]
        late = [f for f in group if f.plan.delay_s]
        if not group:
            continue
        ok = sum(not run.failures_of(f) for f in group)
        counts = sorted(len(f.events) for f in group)
        print(
            f"  {kind:<6} {len(group):>3} followers ({len(late)} late, "
            f"{sum(f.live_at_join for f in late)} of those joined while it ran): {ok} ok, "
            f"events each {counts[0]}..{counts[-1]}"
        )


def print_profile(path: Path, top: int = 25) -> None:
    """The server's functions that took the most time themselves (cProfile ``tottime``)."""
    if not path.exists():
        print(f"\nno profile at {path} (the server did not exit cleanly)")
        return
    print(f"\nserver event-loop profile ({path}), top {top} by own time:")
    pstats.Stats(str(path), stream=sys.stdout).sort_stats("tottime").print_stats(top)
