"""Bad input to Anthropic's Messages API on the bundled model: a few hundred generated bodies
(wrong types, missing fields, unknown blocks and roles, huge values; tests/server/fuzzing.py)
against the live server, each a 4xx in Anthropic's error shape or an answer, never a 5xx; the
service still serves afterwards. (The same cases, thousands of them, run on the scripted engine
in the batches of tests/server/test_fuzz.py.)"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.conftest import LiveServer
from tests.server.fuzzing import (
    ANTHROPIC_PATHS,
    ANTHROPIC_VALID,
    anthropic_shape,
    spoiled_anthropic,
)

#: Generated bodies: enough to reach every field, few enough to stay fast.
EXAMPLES = 300


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
    @given(body=spoiled_anthropic(), path=ANTHROPIC_PATHS)
    def send(body: dict[str, Any], path: str) -> None:
        response = anthropic_api.post(path, json=body)
        statuses[response.status_code] += 1
        if wrong := anthropic_shape(response):
            failures.append(f"{path} {json.dumps(body)[:500]} {wrong}")

    send()
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"
    assert sum(statuses.values()) == EXAMPLES and statuses[400] > EXAMPLES // 2, statuses
    answer = anthropic_api.post("/messages", json=ANTHROPIC_VALID)
    assert answer.status_code == 200 and answer.json()["usage"]["output_tokens"] == 1
