"""Bad input to Anthropic's Messages API: a few hundred generated bodies (wrong types, missing
fields, unknown blocks and roles, huge values) against the live server, each a 4xx in
Anthropic's error shape or an answer, never a 5xx; the service still serves afterwards."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lmsp_jupyter.protocol.items import MAX_ITEMS
from tests.conftest import MODEL, LiveServer

#: Generated bodies: enough to reach every field, few enough to stay fast.
EXAMPLES = 300
#: A valid request the fuzz spoils: one token, so an answer costs the model little.
VALID: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 1,
    "messages": [{"role": "user", "content": "Hi"}],
}
FIELDS = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "metadata",
    "service_tier",
]
#: Values of the wrong type or out of range for every field (no positive integer under a
#: billion: a valid ``max_tokens`` could then ask the model for long answers).
BAD: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(max_value=0),
    st.integers(min_value=10**9, max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.just("x" * 300_000),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)
BLOCK_TYPES = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "video",
    "",
]
BLOCK_FIELDS = [
    "type",
    "text",
    "id",
    "name",
    "input",
    "tool_use_id",
    "content",
    "is_error",
    "source",
]
block: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"type": st.sampled_from(BLOCK_TYPES)},
    optional={name: st.one_of(BAD, st.just({})) for name in BLOCK_FIELDS[1:]},
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool", "", 3]),
        "content": st.one_of(BAD, st.lists(block, max_size=3)),
    }
)


@st.composite
def spoiled(draw: st.DrawFn) -> dict[str, Any]:
    """A valid body with one thing wrong (or, sometimes, still right)."""
    body: dict[str, Any] = json.loads(json.dumps(VALID))
    how = draw(st.sampled_from(["field", "missing", "messages", "blocks", "tools", "huge"]))
    if how == "field":
        body[draw(st.sampled_from(FIELDS))] = draw(BAD)
    elif how == "missing":
        del body[draw(st.sampled_from(["model", "max_tokens", "messages"]))]
    elif how == "messages":
        body["messages"] = draw(st.lists(message, max_size=3))
    elif how == "blocks":
        body["messages"][0]["content"] = draw(st.lists(block, min_size=1, max_size=4))
    elif how == "tools":
        body["tools"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.one_of(st.just("get_weather"), BAD)},
                    optional={"input_schema": st.one_of(BAD, st.just({"maxLength": 10**6}))},
                ),
                max_size=2,
            )
        )
        body["tool_choice"] = draw(
            st.one_of(BAD, st.sampled_from([{"type": "any"}, {"type": "tool", "name": "nope"}]))
        )
    else:
        body["messages"] = [{"role": "user", "content": "x"}] * (MAX_ITEMS + 1)
    return body


@pytest.fixture(scope="module")
def anthropic_api(live_server: LiveServer) -> Iterator[httpx.Client]:
    """A client of the Messages API on the live server, the server's token as its key."""
    headers = {"x-api-key": live_server.token, "anthropic-version": "2023-06-01"}
    base = f"{live_server.root}lmsp/anthropic/v1"
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        yield client


def test_bad_bodies_are_4xx_in_anthropics_shape_and_the_service_serves_on(
    anthropic_api: httpx.Client,
) -> None:
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(body=spoiled(), path=st.sampled_from(["/messages", "/messages/count_tokens"]))
    def send(body: dict[str, Any], path: str) -> None:
        response = anthropic_api.post(path, json=body)
        statuses[response.status_code] += 1
        if response.status_code == 200:
            return
        error = response.json()
        if not (
            400 <= response.status_code < 500
            and set(error) == {"type", "error"}
            and error["type"] == "error"
            and isinstance(error["error"]["message"], str)
            and "Traceback" not in response.text
        ):
            failures.append(
                f"{path} {json.dumps(body)[:500]} → {response.status_code} {response.text[:300]}"
            )

    send()
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"
    assert sum(statuses.values()) == EXAMPLES and statuses[400] > EXAMPLES // 2, statuses
    answer = anthropic_api.post("/messages", json=VALID)
    assert answer.status_code == 200 and answer.json()["usage"]["output_tokens"] == 1
