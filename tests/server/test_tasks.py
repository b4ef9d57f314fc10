"""Tasks, event replay, conversations, idempotency and scoped tokens over HTTP (real model),
on a server with a SQLite store and on one with a PostgreSQL store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import (
    EDITOR_TOKEN,
    LIVE_PARALLEL,
    MODEL,
    READER_TOKEN,
    STORE_KINDS,
    LiveServer,
    live_server_on,
)
from tests.helpers import eventually
from tests.server.helpers import (
    Event,
    ask,
    assert_problem,
    claimed_keys,
    events,
    start,
    wait_for_events,
)

FINAL = {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}


def text_of(response: dict[str, Any]) -> str:
    return "".join(part["text"] for item in response["output"] for part in item.get("content", []))


@pytest.fixture(scope="module", params=STORE_KINDS)
def live_server(
    request: pytest.FixtureRequest,
    live_server: LiveServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    """The live server of the session (SQLite), then one on PostgreSQL."""
    with live_server_on(request.param, live_server, request, tmp_path_factory) as server:
        yield server


@pytest.fixture
def editor(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client(token=EDITOR_TOKEN) as http:
        yield http


# --- creating and following -----------------------------------------------------------------


def test_create_is_202_with_location_and_the_task(
    client: httpx.Client, live_server: LiveServer
) -> None:
    response = client.post("/tasks", json={"type": "response", "request": ask()})
    assert response.status_code == 202
    task = response.json()
    assert task["object"] == "task"
    assert task["type"] == "response"
    assert task["id"].startswith("task_")
    assert task["response_id"].startswith("resp_")
    assert task["status"] in ("queued", "in_progress")
    assert task["result"] is None
    assert task["error"] is None
    assert task["metadata"] == {}
    assert response.headers["location"] == f"/jp/lmsp/v1/tasks/{task['id']}"
    events(client, task["id"])


def test_events_replay_every_event_then_close_after_the_final_one(client: httpx.Client) -> None:
    task = start(client, tokens=6)
    received = events(client, task["id"])
    assert [e.id for e in received] == list(range(1, len(received) + 1))
    assert received[0].event == "response.created"
    assert received[-1].event == "response.incomplete"
    assert sum(e.event in FINAL for e in received) == 1
    assert all(e.data["response_id"] == task["response_id"] for e in received)
    final = client.get(f"/tasks/{task['id']}").json()
    assert final["status"] == "incomplete"
    assert final["last_event_id"] == len(received)
    assert final["started_at"] is not None and final["completed_at"] is not None
    deltas = "".join(e.data["delta"] for e in received if e.event == "response.output_text.delta")
    assert final["result"]["output"][0]["content"][0]["text"] == deltas
    assert final["result"]["usage"]["output_tokens"] == 6
    assert "queue_position" not in final


def test_task_and_direct_request_give_the_same_text(client: httpx.Client) -> None:
    task = start(client, prompt="Tell me a fact.", tokens=10)
    events(client, task["id"])
    result = client.get(f"/tasks/{task['id']}").json()["result"]
    direct = client.post("/responses", json=ask("Tell me a fact.", 10)).json()
    assert result["output"][0]["content"] == direct["output"][0]["content"]


def test_after_wins_over_last_event_id(client: httpx.Client) -> None:
    task = start(client, tokens=6)
    all_events = events(client, task["id"])
    received = events(client, task["id"], params={"after": 3}, headers={"Last-Event-ID": "1"})
    assert [e.id for e in received] == list(range(4, len(all_events) + 1))


def test_last_event_id_is_the_cursor_without_after(client: httpx.Client) -> None:
    task = start(client, tokens=6)
    all_events = events(client, task["id"])
    received = events(client, task["id"], headers={"Last-Event-ID": "2"})
    assert [e.id for e in received] == list(range(3, len(all_events) + 1))
    assert received == all_events[2:]


@pytest.mark.parametrize(
    ("params", "headers", "param"),
    [
        ({"after": "-1"}, {}, "after"),
        ({"after": "abc"}, {}, "after"),
        ({"after": "1.5"}, {}, "after"),
        ({}, {"Last-Event-ID": "x"}, "Last-Event-ID"),
    ],
)
def test_bad_cursor_is_invalid_request(
    client: httpx.Client, params: dict[str, str], headers: dict[str, str], param: str
) -> None:
    task = start(client, tokens=2)
    response = client.get(f"/tasks/{task['id']}/events", params=params, headers=headers)
    problem = assert_problem(response, 400, "invalid_request")
    assert problem["param"] == param
    events(client, task["id"])


def test_cursor_past_the_end_of_a_finished_task_is_an_empty_stream(client: httpx.Client) -> None:
    task = start(client, tokens=2)
    last = len(events(client, task["id"]))
    assert events(client, task["id"], params={"after": last}) == []
    assert events(client, task["id"], params={"after": last + 100}) == []


def test_many_followers_each_get_every_event(client: httpx.Client) -> None:
    task = start(client, tokens=24)

    def follow(after: int) -> list[Event]:
        return events(client, task["id"], params={"after": after})

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(follow, [0] * 6 + [2, 5]))
    full = results[0]
    assert [e.id for e in full] == list(range(1, len(full) + 1))
    assert all(r == full for r in results[:6])
    assert results[6] == full[2:]
    assert results[7] == full[5:]


def test_a_follower_joining_mid_run_gets_replay_then_live_without_gap(client: httpx.Client) -> None:
    task = start(client, tokens=60)
    wait_for_events(client, task["id"], 6)
    late = events(client, task["id"])
    assert [e.id for e in late] == list(range(1, len(late) + 1))
    assert late[-1].event == "response.incomplete"


def test_task_request_is_validated_before_a_task_exists(client: httpx.Client) -> None:
    before = client.get("/tasks", params={"limit": 100}).json()["data"]
    unknown = client.post("/tasks", json={"type": "response", "request": ask(model="nope")})
    assert assert_problem(unknown, 404, "model_not_found")["param"] == "request.model"
    bad = client.post("/tasks", json={"type": "response", "request": ask(temperature=5)})
    assert assert_problem(bad, 400, "invalid_request")["param"] == "request.temperature"
    wrong_type = client.post("/tasks", json={"type": "chat", "request": ask()})
    assert assert_problem(wrong_type, 400, "invalid_request")["param"] == "type"
    too_long = client.post("/tasks", json={"type": "response", "request": ask(tokens=9000)})
    assert_problem(too_long, 400, "context_length_exceeded")
    assert client.get("/tasks", params={"limit": 100}).json()["data"] == before


def test_unknown_task_is_task_not_found(client: httpx.Client) -> None:
    for method, path in [("GET", ""), ("GET", "/events"), ("POST", "/cancel")]:
        response = client.request(method, f"/tasks/task_01J8M6Q4W2T7N5R3V9X1Z8B0DF{path}")
        assert_problem(response, 404, "task_not_found")


# --- cancelling and ordering ----------------------------------------------------------------


def test_cancel_stops_a_running_task_with_response_cancelled(client: httpx.Client) -> None:
    task = start(client, prompt="Write a long story.", tokens=2000)
    wait_for_events(client, task["id"], 5)
    response = client.post(f"/tasks/{task['id']}/cancel")
    assert response.status_code == 200
    assert response.json()["id"] == task["id"]
    received = events(client, task["id"])
    assert received[-1].event == "response.cancelled"
    assert sum(e.event in FINAL for e in received) == 1
    final = client.get(f"/tasks/{task['id']}").json()
    assert final["status"] == "cancelled"
    assert final["result"]["status"] == "cancelled"
    after = client.post("/responses", json=ask("Hi", 2))
    assert after.json()["usage"]["output_tokens"] == 2


def test_cancel_takes_effect_at_the_next_step_while_another_task_holds_the_model(
    client: httpx.Client,
) -> None:
    other, task = (start(client, prompt="Write a long story.", tokens=400) for _ in range(2))
    wait_for_events(client, other["id"], 5)
    wait_for_events(client, task["id"], 5)
    at_cancel = client.post(f"/tasks/{task['id']}/cancel").json()["last_event_id"]
    received = events(client, task["id"])
    assert received[-1].event == "response.cancelled"
    # Deltas of the step in progress (and those the event loop had not recorded yet) at most.
    late = [e for e in received if e.id > at_cancel and e.event == "response.output_text.delta"]
    assert len(late) <= 3
    assert client.get(f"/tasks/{other['id']}").json()["status"] == "in_progress"
    client.post(f"/tasks/{other['id']}/cancel")
    assert events(client, other["id"])[-1].event == "response.cancelled"


def test_cancel_of_a_final_task_changes_nothing(client: httpx.Client) -> None:
    task = start(client, tokens=2)
    received = events(client, task["id"])
    before = client.get(f"/tasks/{task['id']}").json()
    again = client.post(f"/tasks/{task['id']}/cancel")
    assert again.status_code == 200
    assert again.json() == before
    assert events(client, task["id"]) == received


def test_tasks_beyond_the_slots_wait_in_arrival_order_and_tell_their_position(
    client: httpx.Client,
) -> None:
    running = [
        start(client, prompt="Write a long story.", tokens=400) for _ in range(LIVE_PARALLEL)
    ]
    for task in running:
        wait_for_events(client, task["id"], 3)
    second = start(client, tokens=3)
    third = start(client, tokens=3)
    assert client.get(f"/tasks/{second['id']}").json()["queue_position"] == 1
    assert client.get(f"/tasks/{third['id']}").json()["queue_position"] == 2
    cancelled = client.post(f"/tasks/{second['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert [e.event for e in events(client, second["id"])] == ["response.cancelled"]
    assert client.get(f"/tasks/{third['id']}").json()["queue_position"] == 1
    client.post(f"/tasks/{running[0]['id']}/cancel")
    events(client, third["id"])
    first_done = client.get(f"/tasks/{running[0]['id']}").json()
    assert first_done["completed_at"] <= client.get(f"/tasks/{third['id']}").json()["started_at"]
    client.post(f"/tasks/{running[1]['id']}/cancel")
    events(client, running[1]["id"])


def test_list_is_newest_first_with_limit_and_status(client: httpx.Client) -> None:
    ids = [start(client, tokens=1)["id"] for _ in range(3)]
    for task_id in ids:
        events(client, task_id)
    listing = client.get("/tasks", params={"limit": 3}).json()
    assert listing["object"] == "list"
    assert [t["id"] for t in listing["data"]] == ids[::-1]
    incomplete = client.get("/tasks", params={"status": "incomplete", "limit": 100}).json()["data"]
    assert {t["status"] for t in incomplete} == {"incomplete"}
    assert set(ids) <= {t["id"] for t in incomplete}
    assert len(client.get("/tasks").json()["data"]) <= 20


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"status": "done"}, "status"),
    ],
)
def test_bad_list_parameters_are_invalid_request(
    client: httpx.Client, params: dict[str, str], param: str
) -> None:
    problem = assert_problem(client.get("/tasks", params=params), 400, "invalid_request")
    assert problem["param"] == param


def test_a_task_keeps_the_metadata_of_its_request(client: httpx.Client) -> None:
    metadata = {"notebook": "dir/ü.ipynb", "cell": "c-1"}
    task = start(client, tokens=1, metadata=metadata)
    assert task["metadata"] == metadata
    events(client, task["id"])
    assert client.get(f"/tasks/{task['id']}").json()["metadata"] == metadata
    listed = client.get("/tasks", params={"limit": 100}).json()["data"]
    assert [t["metadata"] for t in listed if t["id"] == task["id"]] == [metadata]


def test_list_by_metadata_is_exact_and_needs_every_given_key(client: httpx.Client) -> None:
    notebook = f"filter-{time.monotonic_ns()}.ipynb"
    first = start(client, tokens=1, metadata={"notebook": notebook, "cell": "a"})
    second = start(client, tokens=1, metadata={"notebook": notebook, "cell": "b"})
    other = start(client, tokens=1, metadata={"notebook": notebook + "x", "cell": "a"})
    for task in (first, second, other):
        events(client, task["id"])

    def listed(**params: str) -> list[str]:
        reply = client.get("/tasks", params={"limit": "100", **params})
        assert reply.status_code == 200, reply.text
        return [task["id"] for task in reply.json()["data"]]

    assert listed(**{"metadata.notebook": notebook}) == [second["id"], first["id"]]
    assert listed(**{"metadata.notebook": notebook, "metadata.cell": "a"}) == [first["id"]]
    assert listed(**{"metadata.notebook": notebook, "metadata.kernel": "k"}) == []
    assert listed(**{"metadata.notebook": notebook[:-1]}) == []  # no prefix match
    assert listed(**{"metadata.notebook": notebook, "status": "completed"}) == []
    assert listed(**{"metadata.notebook": notebook, "status": "incomplete", "limit": "1"}) == [
        second["id"]
    ]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("metadata.=x", "metadata."),
        ("metadata.cell=a&metadata.cell=b", "metadata.cell"),
        (f"metadata.{'k' * 65}=x", f"metadata.{'k' * 65}"),
        (f"metadata.cell={'v' * 513}", "metadata.cell"),
        ("&".join(f"metadata.k{i}=v" for i in range(17)), "metadata"),
    ],
)
def test_a_bad_metadata_filter_is_invalid_request(
    client: httpx.Client, query: str, param: str
) -> None:
    problem = assert_problem(client.get(f"/tasks?{query}"), 400, "invalid_request")
    assert problem["param"] == param


# --- conversations --------------------------------------------------------------------------


def test_stored_response_can_be_fetched(client: httpx.Client) -> None:
    created = client.post("/responses", json=ask(tokens=3, store=True)).json()
    fetched = client.get(f"/responses/{created['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == created


def test_unstored_response_is_response_not_found(client: httpx.Client) -> None:
    created = client.post("/responses", json=ask(tokens=2)).json()
    assert_problem(client.get(f"/responses/{created['id']}"), 404, "response_not_found")


def test_previous_response_puts_its_input_and_output_before_the_new_input(
    client: httpx.Client,
) -> None:
    first = client.post("/responses", json=ask("My name is Ada.", 4, store=True)).json()
    second = client.post(
        "/responses", json=ask("What is my name?", 4, previous_response_id=first["id"])
    ).json()
    # The bundled base model's transcript: the earlier prompt and its answer, then the new text
    # on a line of its own, read as a raw completion of that text reads it.
    before = "My name is Ada." + text_of(first)
    transcript = before + ("" if before.endswith("\n") else "\n") + "What is my name?"
    completion = {"model": MODEL, "prompt": transcript, "max_tokens": 1}
    alone = client.post("/completions", json=completion).json()
    assert second["usage"]["input_tokens"] == alone["usage"]["prompt_tokens"]
    assert second["usage"]["input_tokens"] > first["usage"]["total_tokens"]


def test_a_continued_conversation_reads_only_its_new_tokens_and_says_the_same(
    client: httpx.Client,
) -> None:
    first = client.post("/responses", json=ask("Name three colours.", 6, store=True)).json()
    follow = ask("And three animals?", 6, previous_response_id=first["id"])
    second = client.post("/responses", json=follow).json()
    again = client.post("/responses", json=follow).json()
    # The first turn's prompt and answer are in its slot's cache: only what follows is
    # evaluated.
    cached = second["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached > first["usage"]["input_tokens"]
    assert cached < second["usage"]["input_tokens"]
    assert again["usage"]["input_tokens_details"]["cached_tokens"] == (
        second["usage"]["input_tokens"] - 1
    )
    assert text_of(again) == text_of(second) != ""


def test_unknown_previous_response_is_response_not_found(client: httpx.Client) -> None:
    body = ask(previous_response_id="resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF")
    problem = assert_problem(client.post("/responses", json=body), 404, "response_not_found")
    assert problem["param"] == "previous_response_id"


def test_stored_task_results_continue_like_responses(client: httpx.Client) -> None:
    task = start(client, tokens=3, store=True)
    events(client, task["id"])
    stored = client.get(f"/responses/{task['response_id']}")
    assert stored.status_code == 200
    assert stored.json()["status"] == "incomplete"


# --- idempotency ----------------------------------------------------------------------------


def test_same_key_and_body_replays_the_first_response(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-replay-1"}
    first = client.post("/responses", json=ask(tokens=3), headers=headers)
    again = client.post("/responses", json=ask(tokens=3), headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers


def test_same_key_with_another_body_is_idempotency_key_reused(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-reused-1"}
    client.post("/responses", json=ask(tokens=2), headers=headers)
    other = client.post("/responses", json=ask(tokens=3), headers=headers)
    assert_problem(other, 422, "idempotency_key_reused")


def test_a_4xx_answer_is_kept_under_its_key(client: httpx.Client) -> None:
    headers = {"Idempotency-Key": "key-4xx-1"}
    first = client.post("/responses", json=ask(model="nope"), headers=headers)
    again = client.post("/responses", json=ask(model="nope"), headers=headers)
    assert_problem(first, 404, "model_not_found")
    assert_problem(again, 404, "model_not_found")
    assert again.headers["idempotent-replayed"] == "true"


def test_key_while_the_first_sync_request_runs_is_idempotency_in_progress(
    live_server: LiveServer,
) -> None:
    headers = {"Idempotency-Key": "key-running-1"}
    # Long enough to be running when the second request comes, which waits for its claim.
    body = ask("Write a long story.", 64)

    def post() -> httpx.Response:
        with live_server.client() as http:
            return http.post("/responses", json=body, headers=headers)

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post)
        eventually(
            lambda: "key-running-1" in claimed_keys(live_server.store),
            what="the first request's key claimed",
        )
        second = post()
    assert first.result().status_code == 200
    assert_problem(second, 409, "idempotency_in_progress")


def test_identical_task_posts_at_once_make_one_task(live_server: LiveServer) -> None:
    headers = {"Idempotency-Key": "key-task-once-1"}
    body = {"type": "response", "request": ask(tokens=4)}

    def post(_: int) -> httpx.Response:
        with live_server.client() as http:
            return http.post("/tasks", json=body, headers=headers)

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(post, range(4)))
    assert {r.status_code for r in replies} == {202}
    assert len({r.json()["id"] for r in replies}) == 1
    assert sum(r.headers.get("idempotent-replayed") == "true" for r in replies) == 3
    with live_server.client() as http:
        assert len(events(http, replies[0].json()["id"])) > 0


@pytest.mark.parametrize("key", [b"", b"x" * 256, "naïve".encode()])
def test_malformed_idempotency_key_is_invalid_request(client: httpx.Client, key: bytes) -> None:
    response = client.post("/responses", json=ask(tokens=1), headers={b"Idempotency-Key": key})
    problem = assert_problem(response, 400, "invalid_request")
    assert problem["param"] == "Idempotency-Key"


# --- tokens and scopes ----------------------------------------------------------------------


def test_configured_token_works_within_its_scopes(live_server: LiveServer) -> None:
    with live_server.client(token=READER_TOKEN) as reader:
        assert reader.get("/models").status_code == 200
        response = reader.post("/responses", json=ask(tokens=1))
        assert_problem(response, 403, "insufficient_scope")
        assert response.headers["www-authenticate"] == (
            'Bearer error="insufficient_scope", scope="responses:write"'
        )
        assert_problem(reader.get("/tasks"), 403, "insufficient_scope")


def test_a_token_sees_only_its_own_tasks_and_responses(
    client: httpx.Client, editor: httpx.Client
) -> None:
    mine = start(editor, tokens=2)
    events(editor, mine["id"])
    stored = editor.post("/responses", json=ask(tokens=2, store=True)).json()
    assert_problem(client.get(f"/tasks/{mine['id']}"), 404, "task_not_found")
    assert_problem(client.get(f"/tasks/{mine['id']}/events"), 404, "task_not_found")
    assert_problem(client.post(f"/tasks/{mine['id']}/cancel"), 404, "task_not_found")
    assert_problem(client.get(f"/responses/{stored['id']}"), 404, "response_not_found")
    assert mine["id"] not in [
        t["id"] for t in client.get("/tasks", params={"limit": 100}).json()["data"]
    ]
    assert editor.get(f"/tasks/{mine['id']}").status_code == 200
    theirs = start(client, tokens=1)
    assert_problem(editor.get(f"/tasks/{theirs['id']}"), 404, "task_not_found")
    events(client, theirs["id"])


def test_a_cursor_past_the_end_of_a_live_task_closes_when_it_ends(client: httpx.Client) -> None:
    task = start(client, tokens=10)
    assert events(client, task["id"], params={"after": 1000}) == []
    final = client.get(f"/tasks/{task['id']}").json()
    assert final["status"] == "incomplete"
