"""A real browser follows a task's events with ``EventSource`` (LMSP 6.3, 6.4 and 7).

Headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) logs in to the live
Jupyter server with its token through a loopback proxy, so its page is same-origin with the
API and authenticates with Jupyter's cookie. The proxy can cut every connection mid-stream;
the browser's own ``EventSource`` reconnection (``retry: 2000`` and ``Last-Event-ID``) must
then deliver every event exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page

from lmsp_jupyter.kernel.state import FINAL_STATUSES
from tests.conftest import MODEL, LiveServer
from tests.helpers import eventually
from tests.proxy import LoopbackProxy
from tests.ui.lab import server_task

FINAL_TYPES = (
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.cancelled",
)
#: Every event a text answer sends (with the part and done events of LMSP 11.4).
EVENT_TYPES = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    *FINAL_TYPES,
)
STORY = "Write a long story about a cat."

BLANK_PAGE = "<!doctype html><title>EventSource test</title>"
#: Installed once per page: ``follow(url)`` opens an EventSource and records what it gets.
FOLLOW_JS = """
([eventTypes, finalTypes]) => {
  window.follow = (url) => {
    window.received = [];
    window.opens = [];
    window.errors = 0;
    window.done = false;
    const source = new EventSource(url);
    window.source = source;
    source.addEventListener("open", () => window.opens.push(window.received.length));
    source.addEventListener("error", () => { window.errors += 1; });
    for (const type of eventTypes) {
      source.addEventListener(type, (e) => {
        window.received.push({id: e.lastEventId, type: e.type, data: e.data});
        if (finalTypes.includes(e.type)) {
          source.close();
          window.done = true;
        }
      });
    }
  };
}
"""


@pytest.fixture
def proxy(live_server: LiveServer) -> Iterator[LoopbackProxy]:
    """A cuttable proxy in front of the live server."""
    port = urlsplit(live_server.root).port
    assert port is not None
    with LoopbackProxy(port, lifetime=600) as proxy:
        yield proxy


@pytest.fixture
def page(browser: Browser, live_server: LiveServer, proxy: LoopbackProxy) -> Iterator[Page]:
    """A page on the proxy's origin, logged in to Jupyter with its cookie, with ``follow``."""
    origin = f"http://127.0.0.1:{proxy.port}"
    base = urlsplit(live_server.root).path
    context = browser.new_context()
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        # A request carrying the token makes Jupyter set its login cookie.
        login = page.goto(f"{origin}{base}api/status?token={live_server.token}")
        assert login is not None and login.status == 200
        assert any(cookie["name"].startswith("username-") for cookie in context.cookies())
        # A blank same-origin document to run the script in, served by the browser itself:
        # Jupyter's API replies carry ``Content-Security-Policy: default-src 'none'``, which
        # would block an EventSource opened from them.
        page.route(
            f"{origin}/eventsource-test",
            lambda route: route.fulfill(content_type="text/html", body=BLANK_PAGE),
        )
        page.goto(f"{origin}/eventsource-test")
        page.evaluate(FOLLOW_JS, [list(EVENT_TYPES), list(FINAL_TYPES)])
        # The cookie alone authenticates the page with LMSP.
        status = page.evaluate(f"fetch({json.dumps(base + 'lmsp/v1')}).then(r => r.status)")
        assert status == 200, "cookie login did not work"
        yield page
    finally:
        context.close()


def create_task(live_server: LiveServer, max_output_tokens: int) -> dict[str, Any]:
    """Start a greedy story task with the bundled model; return the task object."""
    request = {
        "model": MODEL,
        "input": STORY,
        "temperature": 0,
        "max_output_tokens": max_output_tokens,
    }
    with live_server.client() as client:
        reply = client.post("/tasks", json={"type": "response", "request": request})
    assert reply.status_code == 202, reply.text
    task: dict[str, Any] = reply.json()
    assert task["id"].startswith("task_")
    return task


def wait_final(live_server: LiveServer, task_id: str, timeout: float = 180) -> dict[str, Any]:
    """Poll the task until it is final."""

    def final() -> dict[str, Any] | None:
        task = server_task(live_server, task_id)
        return task if task["status"] in FINAL_STATUSES else None

    return eventually(final, within=timeout, interval=0.2, what=f"task {task_id} final")


def wait_for(page: Page, expression: str, timeout: float, what: str) -> None:
    """Poll a JavaScript expression in the page until it is true, or fail saying ``what``."""

    def state() -> str:
        page_state = page.evaluate(
            "({received: window.received, opens: window.opens, errors: window.errors})"
        )
        return f"{what}; the page has {json.dumps(page_state)}"

    eventually(lambda: page.evaluate(expression), within=timeout, interval=0.02, what=state)


def received(page: Page) -> list[dict[str, Any]]:
    """What the page recorded: ``{id, type, data}`` with ``id`` an int and ``data`` parsed."""
    events: list[dict[str, Any]] = page.evaluate("window.received")
    return [
        {"id": int(event["id"]), "type": event["type"], "data": json.loads(event["data"])}
        for event in events
    ]


def events_path(live_server: LiveServer, task_id: str) -> str:
    """The path of a task's events, as the browser asks for it."""
    return f"{urlsplit(live_server.lmsp).path}/tasks/{task_id}/events"


def assert_one_full_stream(events: list[dict[str, Any]], last_event_id: int) -> None:
    """Events 1..N once each and in order, one final event at the end, text consistent."""
    ids = [event["id"] for event in events]
    assert ids == list(range(1, len(ids) + 1)), f"ids not 1..N without gap or repeat: {ids}"
    assert len(events) == last_event_id
    types = [event["type"] for event in events]
    assert types[0] == "response.created"
    assert [t for t in types if t in FINAL_TYPES] == [types[-1]], types
    assert types[-1] in ("response.incomplete", "response.completed"), events[-1]
    if types[-1] == "response.incomplete":
        assert events[-1]["data"]["incomplete_details"] == {"reason": "max_output_tokens"}
    deltas = "".join(
        e["data"]["delta"] for e in events if e["type"] == "response.output_text.delta"
    )
    (done,) = [e["data"]["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done["type"] == "message"
    assert "".join(part["text"] for part in done["content"]) == deltas
    assert deltas


def test_eventsource_reconnects_after_a_cut_and_misses_nothing(
    live_server: LiveServer, proxy: LoopbackProxy, page: Page
) -> None:
    task = create_task(live_server, max_output_tokens=200)
    path = events_path(live_server, task["id"])
    page.evaluate("(url) => window.follow(url)", path)

    delta = "response.output_text.delta"
    wait_for(
        page,
        f"window.received.filter(e => e.type === {json.dumps(delta)}).length >= 3",
        timeout=240,  # the task may wait behind others for the model; the machine may be busy
        what="three deltas",
    )
    cut = proxy.cut()
    before_cut = page.evaluate("window.received.length")
    status_at_cut = server_task(live_server, task["id"])["status"]
    assert cut >= 1
    assert proxy.connections_for(path), "the events never went through the proxy"

    wait_for(page, "window.done === true", timeout=240, what="the final event after the cut")
    events = received(page)
    final = wait_final(live_server, task["id"])
    opens: list[int] = page.evaluate("window.opens")
    errors: int = page.evaluate("window.errors")

    assert_one_full_stream(events, final["last_event_id"])
    assert final["status"] == events[-1]["data"]["status"]
    assert before_cut < len(events), "the cut came after the stream had ended"
    # The browser reconnected by itself, on a new connection, sending the last id it had.
    assert errors >= 1
    assert len(opens) >= 2, opens
    after_cut = proxy.connections_for(path, after_cut=1)
    assert after_cut, "no new connection for the events after the cut"
    assert len(proxy.connections_for(path)) >= 2
    resumed = [r for c in after_cut for r in c.requests if r.path == path]
    assert resumed[0].headers.get("last-event-id") == str(opens[1]), (resumed, opens)
    print(
        f"\n{len(events)} events; cut after {before_cut} received (task {status_at_cut}); "
        f"reconnected at id {opens[1]} after {errors} error(s)"
    )


def test_eventsource_with_after_on_a_finished_task(
    live_server: LiveServer, proxy: LoopbackProxy, page: Page
) -> None:
    task = create_task(live_server, max_output_tokens=24)
    final = wait_final(live_server, task["id"])
    last = final["last_event_id"]
    assert last > 4
    path = events_path(live_server, task["id"])

    # Nothing after the last event: each connection is an empty stream that closes at once,
    # and the EventSource keeps reconnecting (a 200 event stream, not an error).
    page.evaluate("(url) => window.follow(url)", f"{path}?after={last}")
    wait_for(page, "window.opens.length >= 2", timeout=20, what="two empty connections")
    assert page.evaluate("window.source.readyState") != 2, "the EventSource gave up: not a 200?"
    page.evaluate("window.source.close()")
    assert page.evaluate("window.received") == []

    # After 3: exactly events 4..N, then the final event closes the source.
    page.evaluate("(url) => window.follow(url)", f"{path}?after=3")
    wait_for(page, "window.done === true", timeout=30, what="the final event")
    events = received(page)
    assert [event["id"] for event in events] == list(range(4, last + 1))
    assert events[-1]["type"] in FINAL_TYPES
    assert [e["type"] for e in events if e["type"] in FINAL_TYPES] == [events[-1]["type"]]
    assert page.evaluate("window.opens") == [0]
