"""LMSP over HTTP against a live ``jupyter server`` with the extension (real model)."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import message_events
from tests.server.helpers import ask, assert_problem, stream
from tests.spec import SPEC_SERVICE_DOCUMENT

JSON = {"Content-Type": "application/json"}


# --- service document and models ------------------------------------------------------------


def test_service_document_names_version_capabilities_and_scopes(client: httpx.Client) -> None:
    response = client.get("")
    assert response.status_code == 200
    document = response.json()
    assert document["object"] == "service"
    assert document["lmsp_version"] == "1.0"
    assert document["service"]["name"] == "lmsp-jupyter"
    assert document["capabilities"] == SPEC_SERVICE_DOCUMENT["capabilities"]
    assert document["auth"] == SPEC_SERVICE_DOCUMENT["auth"]


def test_models_list_the_bundled_default(client: httpx.Client) -> None:
    listing = client.get("/models").json()
    assert listing["object"] == "list"
    model = next(m for m in listing["data"] if m["id"] == MODEL)
    assert model["object"] == "model"
    assert model["format"] == "gguf"
    assert model["owned_by"] == "local"
    assert model["context_length"] == 8192
    assert model["capabilities"] == ["streaming", "tools", "structured_output", "conversations"]
    assert model["status"] in ("available", "loaded")
    assert model["size_bytes"] == 253_113_024


def test_one_model_by_percent_encoded_id(client: httpx.Client) -> None:
    response = client.get(f"/models/{quote(MODEL, safe='')}")
    assert response.status_code == 200
    assert response.json()["id"] == MODEL


def test_unknown_model_is_model_not_found(client: httpx.Client) -> None:
    assert_problem(client.get("/models/nope%3A1b"), 404, "model_not_found")


def test_model_is_loaded_after_first_use(client: httpx.Client) -> None:
    assert client.post("/responses", json=ask(max_output_tokens=1)).status_code == 200
    assert client.get(f"/models/{quote(MODEL, safe='')}").json()["status"] == "loaded"


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"}]
)
def test_missing_or_wrong_token_is_unauthorized_with_challenge(
    live_server: LiveServer, headers: dict[str, str]
) -> None:
    for method, path in [("GET", ""), ("GET", "/models"), ("POST", "/responses"), ("GET", "/nope")]:
        response = httpx.request(method, f"{live_server.lmsp}{path}", headers=headers, json=ask())
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == 'Bearer realm="lmsp"'


def test_jupyter_token_works_as_bearer_and_as_token_scheme(live_server: LiveServer) -> None:
    for scheme in ("Bearer", "bearer", "token"):
        headers = {"Authorization": f"{scheme} {live_server.token}"}
        assert httpx.get(live_server.lmsp, headers=headers).status_code == 200


def test_browser_session_needs_xsrf_for_posts(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.root, timeout=120) as browser:
        login = browser.get("login")
        xsrf = browser.cookies["_xsrf"]
        response = browser.post("login", data={"_xsrf": xsrf, "password": live_server.token})
        assert response.status_code in (200, 302), login.text
        assert browser.get("lmsp/v1/models").status_code == 200
        forged = browser.post("lmsp/v1/responses", json=ask())
        assert_problem(forged, 403, "forbidden_origin")
        allowed = browser.post("lmsp/v1/responses", json=ask(), headers={"X-XSRFToken": xsrf})
        assert allowed.status_code == 200, allowed.text


def test_cross_origin_browser_request_is_forbidden_origin(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.root, timeout=120) as browser:
        browser.get("login")
        xsrf = browser.cookies["_xsrf"]
        browser.post("login", data={"_xsrf": xsrf, "password": live_server.token})
        response = browser.get("lmsp/v1/models", headers={"Origin": "http://evil.example"})
        assert_problem(response, 403, "forbidden_origin")


# --- versioning -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "1.0", "1"])
def test_served_versions_are_accepted_and_every_reply_names_1_0(
    client: httpx.Client, version: str | None
) -> None:
    headers = {"LMSP-Version": version} if version else {}
    response = client.get("", headers=headers)
    assert response.status_code == 200
    assert response.headers["lmsp-version"] == "1.0"


@pytest.mark.parametrize("version", ["2.0", "1.1", "0.9", "banana"])
def test_other_versions_are_unsupported_version(client: httpx.Client, version: str) -> None:
    response = client.get("/models", headers={"LMSP-Version": version})
    problem = assert_problem(response, 400, "unsupported_version")
    assert problem["supported_versions"] == ["1.0"]
    assert response.headers["lmsp-version"] == "1.0"


# --- errors are problems --------------------------------------------------------------------


def test_unknown_path_is_not_found_problem(client: httpx.Client) -> None:
    assert_problem(client.get("/nope"), 404, "not_found")
    assert_problem(client.post("/v2/things", json={}), 404, "not_found")


def test_wrong_method_is_method_not_allowed_with_allow(client: httpx.Client) -> None:
    response = client.delete("/models")
    assert_problem(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET"
    response = client.get("/responses")
    assert_problem(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "POST"


def test_malformed_json_is_invalid_request(client: httpx.Client) -> None:
    response = client.post("/responses", content=b'{"model": ', headers=JSON)
    assert_problem(response, 400, "invalid_request")


def test_non_object_body_is_invalid_request(client: httpx.Client) -> None:
    assert_problem(client.post("/responses", json=[1, 2]), 400, "invalid_request")


def test_unknown_field_is_invalid_request_naming_it(client: httpx.Client) -> None:
    problem = assert_problem(
        client.post("/responses", json=ask(temprature=0)), 400, "invalid_request"
    )
    assert problem["param"] == "temprature"


def test_wrong_type_names_the_field(client: httpx.Client) -> None:
    body = ask(input=[{"type": "message", "role": "user", "content": [{"type": "input_text"}]}])
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == "input[0].content[0].text"


def test_reserved_content_type_is_unsupported_capability(client: httpx.Client) -> None:
    part = {"type": "input_image", "image_url": "data:,"}
    body = ask(input=[{"type": "message", "role": "user", "content": [part]}])
    problem = assert_problem(client.post("/responses", json=body), 400, "unsupported_capability")
    assert problem["param"] == "input[0].content[0].type"


def test_schema_the_decoder_cannot_enforce_is_invalid_request(client: httpx.Client) -> None:
    schema = {"oneOf": [{"type": "number"}, {"type": "integer"}]}  # branches overlap
    body = ask(
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    )
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == "response_format"


def test_unknown_model_in_request_is_model_not_found(client: httpx.Client) -> None:
    problem = assert_problem(
        client.post("/responses", json=ask(model="nope")), 404, "model_not_found"
    )
    assert problem["param"] == "model"


def test_non_json_content_type_is_unsupported_media_type(client: httpx.Client) -> None:
    response = client.post("/responses", content=b"model=x", headers={"Content-Type": "text/plain"})
    assert_problem(response, 415, "unsupported_media_type")


def test_body_over_the_limit_is_payload_too_large(client: httpx.Client) -> None:
    body = ask(input="x" * (8 * 1024 * 1024 + 1))
    assert_problem(client.post("/responses", json=body), 413, "payload_too_large")


def test_service_keeps_serving_after_bad_input(client: httpx.Client) -> None:
    client.post("/responses", content=b"{{{", headers=JSON)
    client.post("/responses", json=ask(model="nope"))
    response = client.post("/responses", json=ask(max_output_tokens=2))
    assert response.status_code == 200
    assert response.json()["usage"]["output_tokens"] == 2


# --- synchronous responses ------------------------------------------------------------------


def test_sync_response_object(client: httpx.Client) -> None:
    response = client.post("/responses", json=ask(max_output_tokens=6))
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("resp_") and len(body["id"]) == 31
    assert body["object"] == "response"
    assert body["model"] == MODEL
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["error"] is None
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_")
    [part] = message["content"]
    assert part["type"] == "output_text" and part["text"]
    usage = body["usage"]
    assert usage["output_tokens"] == 6
    assert usage["total_tokens"] == usage["input_tokens"] + 6


def test_usage_counts_the_models_own_prompt_tokens(client: httpx.Client) -> None:
    # The bundled base model reads the text as written: <bos> Hi
    body = client.post("/responses", json=ask("Hi", max_output_tokens=1)).json()
    assert body["usage"]["input_tokens"] == 2


def test_temperature_zero_is_deterministic(client: httpx.Client) -> None:
    first = client.post("/responses", json=ask("Count: one, two,", max_output_tokens=12)).json()
    client.post("/responses", json=ask("Something else entirely", max_output_tokens=5))
    second = client.post("/responses", json=ask("Count: one, two,", max_output_tokens=12)).json()
    assert first["output"][0]["content"] == second["output"][0]["content"]
    assert first["id"] != second["id"]


def test_context_length_exceeded_before_generation(client: httpx.Client) -> None:
    problem = assert_problem(
        client.post("/responses", json=ask(max_output_tokens=8192)), 400, "context_length_exceeded"
    )
    assert problem["param"] == "max_output_tokens"


# --- streaming ------------------------------------------------------------------------------


def test_stream_headers(client: httpx.Client) -> None:
    with client.stream("POST", "/responses", json=ask(stream=True)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["lmsp-version"] == "1.0"
        response.read()


def test_stream_events_in_order_with_ids_from_one(client: httpx.Client) -> None:
    _, events = stream(client, ask(max_output_tokens=5))
    names = [e.event for e in events]
    assert names == message_events(len(events) - 8, "response.incomplete")
    assert [e.data["type"] for e in events] == names
    assert [e.data["sequence_number"] for e in events] == [e.id for e in events]
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    response_id = events[0].data["response_id"]
    assert all(e.data["response_id"] == response_id for e in events)
    assert events[0].data["status"] == "in_progress"
    final = events[-1].data
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 5


def test_stream_deltas_concatenate_to_the_final_text(client: httpx.Client) -> None:
    _, events = stream(client, ask(max_output_tokens=12))
    item = events[2].data["item"]
    deltas = [e.data for e in events if e.event == "response.output_text.delta"]
    assert all(d["item_id"] == item["id"] for d in deltas)
    done = next(e.data for e in events if e.event == "response.output_item.done")
    assert done["item"]["id"] == item["id"]
    assert "".join(d["delta"] for d in deltas) == done["item"]["content"][0]["text"]


def test_sync_and_stream_give_the_same_text(client: httpx.Client) -> None:
    sync = client.post("/responses", json=ask("Tell me a fact.", max_output_tokens=12)).json()
    _, events = stream(client, ask("Tell me a fact.", max_output_tokens=12))
    done = next(e.data for e in events if e.event == "response.output_item.done")
    assert done["item"]["content"] == sync["output"][0]["content"]
    usage = events[-1].data["usage"]
    # The stream's prompt is the sync request's: all of it but its last token comes from cache.
    cached = sync["usage"]["input_tokens"] - 1
    assert usage["input_tokens_details"] == {"cached_tokens": cached}
    uncached = {"input_tokens_details": None}
    assert {**usage, **uncached} == {**sync["usage"], **uncached}


def test_stream_with_a_stop_completes(client: httpx.Client) -> None:
    # Asking for one token more than the model writes before its end-of-turn token.
    body = ask("Hi", max_output_tokens=256)
    sync = client.post("/responses", json=body).json()
    _, events = stream(client, body)
    expected = "response.completed" if sync["status"] == "completed" else "response.incomplete"
    assert events[-1].event == expected
    assert sum(e.event in ("response.completed", "response.incomplete") for e in events) == 1


def test_stream_errors_come_before_the_stream_starts(client: httpx.Client) -> None:
    response, events = stream(client, ask(max_output_tokens=100_000))
    assert_problem(response, 400, "context_length_exceeded")
    assert events == []
    response, _ = stream(client, ask(model="nope"))
    assert_problem(response, 404, "model_not_found")


def test_a_model_id_is_percent_decoded_once(client: httpx.Client) -> None:
    problem = assert_problem(client.get("/models/x%2541"), 404, "model_not_found")
    assert problem["detail"] == "model 'x%41' is not available"


def test_plain_string_content_is_limited_as_text_not_as_a_list(client: httpx.Client) -> None:
    message = {"type": "message", "role": "user", "content": "word " * 2001}
    response = client.post("/responses", json=ask(input=[message], max_output_tokens=1))
    assert response.status_code == 200, response.text
