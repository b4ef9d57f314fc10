"""A tool call through a stdio MCP server, run by the service, against the same tool as a
kernel ``@tool``: a function call the client runs and answers in a new request.

One ``jupyter lmsp`` with the bundled model and an ``mcp.json`` running
``@modelcontextprotocol/server-everything`` over stdio (from ``tests/compat/js``); each call is
a forced call of its ``get-sum`` tool (two numbers: short arguments), so the model's part is the
same on both sides:

* mcp: ``tools: [{"type": "mcp", ...}]``; the added latency of a call is from its
  ``response.mcp_call_arguments.done`` to its ``response.mcp_call.completed`` (the service runs
  it on the server meanwhile);
* function: the same ``get-sum`` as a function tool; the added latency is from the call's
  ``response.output_item.done`` to the ``response.in_progress`` of the request that gives the
  output back (``previous_response_id``): the client runs ``get-sum`` and asks again, as the
  kernel's tool loop does.

The first MCP request of the run (after one without tools has loaded the model) starts the
server: its start-up is that request's time to ``response.created`` less the median of the
warm ones (which list the tools again, in a new conversation each). It measures and never
asserts (goal: MCP's added latency ≤ 20 ms p50).

Run: ``.venv/bin/python benchmarks/mcp_calls.py [--calls 50]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

if not __package__:  # run as a file: python benchmarks/mcp_calls.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.server import Server, running_server
from benchmarks.harness.sse import iter_events
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from tests.helpers import MCP_EVERYTHING, mcp_stdio_server

SUM_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
MCP_TOOL = {
    "type": "mcp",
    "server_label": "everything",
    "allowed_tools": ["get-sum"],  # the same one tool in the prompt as on the other side
    "require_approval": "never",
}
FUNCTION_TOOL = {"type": "function", "name": "get-sum", "parameters": SUM_SCHEMA}


def timed_events(
    client: httpx.Client, body: dict[str, Any]
) -> list[tuple[float, str, dict[str, Any]]]:
    """The events of a streamed response with when each arrived (``perf_counter``)."""
    events: list[tuple[float, str, dict[str, Any]]] = []
    with client.stream("POST", "/responses", json={**body, "stream": True}) as response:
        response.raise_for_status()
        for event in iter_events(response):
            events.append((time.perf_counter(), event.event, json.loads(event.data)))
    return events


def at(events: list[tuple[float, str, dict[str, Any]]], name: str, kind: str = "") -> float:
    """When the first event ``name`` (of an item of type ``kind``, if given) arrived."""
    for when, event, data in events:
        if event == name and (not kind or data.get("item", {}).get("type") == kind):
            return when
    raise RuntimeError(f"no {name} event: {[event for _, event, _ in events]}")


def ask(tokens: int, **fields: Any) -> dict[str, Any]:
    return {
        "model": BUNDLED_MODEL_ID,
        "input": "Add 2 and 3.",
        "temperature": 0,
        "max_output_tokens": tokens,
        **fields,
    }


def mcp_call(client: httpx.Client, tokens: int) -> tuple[float, float]:
    """One MCP call: (time to response.created, added latency of the call) in seconds."""
    choice = {"type": "mcp", "server_label": "everything", "name": "get-sum"}
    start = time.perf_counter()
    events = timed_events(client, ask(tokens, tools=[MCP_TOOL], tool_choice=choice))
    created = at(events, "response.created") - start
    return created, at(events, "response.mcp_call.completed") - at(
        events, "response.mcp_call_arguments.done"
    )


def function_call(client: httpx.Client, tokens: int) -> float:
    """One function call the client runs: its added latency in seconds."""
    choice = {"type": "function", "name": "get-sum"}
    first = timed_events(client, ask(tokens, tools=[FUNCTION_TOOL], tool_choice=choice, store=True))
    done = at(first, "response.output_item.done", "function_call")
    call = next(d["item"] for _, e, d in first if e == "response.output_item.done")
    response_id = first[-1][2]["response"]["id"]
    arguments = json.loads(call["arguments"])  # the tool, run here
    output = (
        f"The sum of {arguments['a']} and {arguments['b']} is {arguments['a'] + arguments['b']}."
    )
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": output}
    second = timed_events(
        client,
        ask(tokens, tools=[FUNCTION_TOOL], previous_response_id=response_id, input=[answer]),
    )
    return at(second, "response.in_progress") - done


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def body(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    config = scratch / "mcp.json"
    servers = {"everything": mcp_stdio_server(MCP_EVERYTHING, "stdio")}
    config.write_text(json.dumps({"mcpServers": servers}))
    extra = [f"--McpServers.config_file={config}"]
    with running_server(log_path, extra=extra, root=scratch) as server:
        measure(server, args)


def measure(server: Server, args: argparse.Namespace) -> None:
    with httpx.Client(base_url=server.lmsp_url, headers=server.headers, timeout=300) as client:
        client.post("/responses", json=ask(args.tokens)).raise_for_status()  # the model loaded
        cold, _ = mcp_call(client, args.tokens)
        function_call(client, args.tokens)  # warm-up of the other side
        created, mcp, function = [], [], []
        for _ in range(args.calls):  # the sides in turn
            warm, added = mcp_call(client, args.tokens)
            created.append(warm)
            mcp.append(added)
            function.append(function_call(client, args.tokens))
    print(f"bundled model, get-sum of server-everything over stdio, {args.calls} calls each")
    print(f"{'side':<10} {'p50 ms':>8} {'p95 ms':>8}")
    for side, values in (("mcp", mcp), ("function", function)):
        p50, p95 = percentile(values, 0.5) * 1000, percentile(values, 0.95) * 1000
        print(f"{side:<10} {p50:8.1f} {p95:8.1f}")
    startup = (cold - statistics.median(created)) * 1000
    print(f"first call start-up (server spawn, initialize, list): {startup:.0f} ms")
    print("goal: mcp p50 <= 20 ms")


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__ or "", tokens=24)
    parser.add_argument("--calls", type=int, default=50, help="measured calls of each side")
    return benchmark_main(parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
