"""Tests for problem documents (LMSP 1.0 section 9.3), response events (6.3) and IDs (6.2)."""

from __future__ import annotations

import json
import re
from typing import get_args

import pytest

from lmsp_jupyter.protocol import events
from lmsp_jupyter.protocol.errors import (
    EXTENSION_CODES,
    PROBLEM_TYPES,
    LmspError,
    Problem,
    ProblemCode,
)
from lmsp_jupyter.protocol.ids import new_id
from lmsp_jupyter.protocol.items import OutputMessage, OutputText
from lmsp_jupyter.protocol.responses import IncompleteDetails, Usage
from lmsp_jupyter.server.sse import sse_frame
from tests.protocol.helpers import RESPONSE, RID
from tests.spec import SPEC_STATUSES

ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
MID = "msg_01J8M6Q4W5C8H2K9P3S7Y1A6ZE"
USAGE = Usage(input_tokens=28, output_tokens=31, total_tokens=59)


# --- problems ----------------------------------------------------------------------------------


def test_every_spec_error_code_has_the_spec_status() -> None:
    statuses = {code: status for code, (status, _) in PROBLEM_TYPES.items()}
    assert {
        code: statuses[code] for code in statuses if code not in EXTENSION_CODES
    } == SPEC_STATUSES


def test_problem_code_type_lists_exactly_the_spec_codes_and_this_services_own() -> None:
    assert not EXTENSION_CODES & set(SPEC_STATUSES)
    assert set(get_args(ProblemCode)) == set(SPEC_STATUSES) | EXTENSION_CODES


@pytest.mark.parametrize("code", sorted(SPEC_STATUSES))
def test_to_problem_gives_the_status_and_title_of_the_code(code: ProblemCode) -> None:
    error = LmspError(code)
    problem = error.to_problem()
    assert (problem.type, problem.status, problem.title, problem.code) == (
        "about:blank",
        SPEC_STATUSES[code],
        PROBLEM_TYPES[code][1],
        code,
    )
    assert error.status == SPEC_STATUSES[code]


def test_to_problem_matches_the_spec_example() -> None:
    problem = LmspError(
        "unsupported_capability", "model 'x' has no 'tools' capability", param="tools"
    ).to_problem()
    assert json.loads(problem.model_dump_json()) == {
        "type": "about:blank",
        "title": "Unsupported capability",
        "status": 400,
        "code": "unsupported_capability",
        "detail": "model 'x' has no 'tools' capability",
        "param": "tools",
        "message": "model 'x' has no 'tools' capability",
    }


def test_to_problem_keeps_extra_fields() -> None:
    problem = LmspError(
        "unsupported_version", "LMSP-Version 2.0 is not served", supported_versions=["1.0"]
    ).to_problem()
    assert problem.model_dump() == {
        "type": "about:blank",
        "title": "Unsupported version",
        "status": 400,
        "code": "unsupported_version",
        "detail": "LMSP-Version 2.0 is not served",
        "param": None,
        "message": "LMSP-Version 2.0 is not served",
        "supported_versions": ["1.0"],
    }


def test_error_headers_are_not_part_of_the_problem() -> None:
    error = LmspError("overloaded", "queue full", retry_after=5, replayed=True)
    assert (error.retry_after, error.replayed) == (5, True)
    problem = error.to_problem().model_dump()
    assert "headers" not in problem and "retry_after" not in problem and "replayed" not in problem
    assert "Retry-After" not in error.to_problem().model_dump_json()


def test_error_message_is_its_detail_else_its_code() -> None:
    assert str(LmspError("not_found", "no such path")) == "no such path"
    assert str(LmspError("not_found")) == "not_found"


def test_problem_refuses_an_unknown_code() -> None:
    with pytest.raises(ValueError, match="code"):
        Problem(title="Teapot", status=418, code="teapot")


# --- events ------------------------------------------------------------------------------------


def delta(text: str) -> events.OutputTextDelta:
    return events.OutputTextDelta(
        response_id=RID, item_id=MID, output_index=0, content_index=0, delta=text
    )


def test_to_sse_is_id_event_and_one_line_of_json_data() -> None:
    event = events.ResponseEvent(id=3, data=delta("Hi"))
    assert sse_frame(event) == (
        b"id: 3\n"
        b"event: response.output_text.delta\n"
        b'data: {"type":"response.output_text.delta","sequence_number":3,"response_id":"'
        + RID.encode()
        + b'","item_id":"'
        + MID.encode()
        + b'","output_index":0,"content_index":0,"delta":"Hi"}\n\n'
    )


def test_event_data_carries_its_name_as_type_and_its_id_as_sequence_number() -> None:
    data = json.loads(
        events.ResponseEvent(
            id=9, data=events.ResponseCancelled(response_id=RID, response=RESPONSE)
        ).data_json()
    )
    assert (data["type"], data["sequence_number"], data["response"]["id"]) == (
        "response.cancelled",
        9,
        RID,
    )


def test_to_sse_data_is_one_line_when_the_delta_has_newlines() -> None:
    text = "line one\nline two\r\n\nend\u2028"
    sse = events.ResponseEvent(id=7, data=delta(text))
    assert b"\r" not in sse_frame(sse)
    lines = sse_frame(sse).decode().split("\n")
    assert lines[:2] == ["id: 7", "event: response.output_text.delta"]
    assert lines[2].startswith("data: ")
    assert lines[3:] == ["", ""]
    assert json.loads(lines[2].removeprefix("data: "))["delta"] == text


def test_to_sse_keeps_null_fields() -> None:
    item = OutputMessage(id=MID)
    sse = events.ResponseEvent(
        id=2, data=events.OutputItemAdded(response_id=RID, output_index=0, item=item)
    )
    data = sse_frame(sse).decode().split("\n")[2].removeprefix("data: ")
    assert json.loads(data) == {
        "type": "response.output_item.added",
        "sequence_number": 2,
        "response_id": RID,
        "output_index": 0,
        "item": {
            "type": "message",
            "id": MID,
            "role": "assistant",
            "status": "completed",
            "content": [],
        },
    }


def test_to_sse_of_a_failed_event_carries_the_problem() -> None:
    problem = LmspError("generation_failed", "boom").to_problem()
    failed = events.ResponseFailed(response_id=RID, error=problem, response=RESPONSE)
    sse = sse_frame(events.ResponseEvent(id=4, data=failed))
    head, data = sse.decode().split("\ndata: ")
    fields = json.loads(data)
    assert head == "id: 4\nevent: response.failed"
    assert fields.pop("response")["id"] == RID
    assert fields == {
        "type": "response.failed",
        "sequence_number": 4,
        "response_id": RID,
        "status": "failed",
        "error": {
            "type": "about:blank",
            "title": "Generation failed",
            "status": 500,
            "code": "generation_failed",
            "detail": "boom",
            "param": None,
            "message": "boom",
        },
    }


EVENTS = [
    (events.ResponseCreated(response_id=RID, response=RESPONSE), "response.created", False),
    (
        events.OutputItemAdded(response_id=RID, output_index=0, item=OutputMessage(id=MID)),
        "response.output_item.added",
        False,
    ),
    (delta("x"), "response.output_text.delta", False),
    (
        events.OutputItemDone(
            response_id=RID,
            output_index=0,
            item=OutputMessage(id=MID, content=[OutputText(text="x")]),
        ),
        "response.output_item.done",
        False,
    ),
    (
        events.ResponseCompleted(response_id=RID, usage=USAGE, response=RESPONSE),
        "response.completed",
        True,
    ),
    (
        events.ResponseIncomplete(
            response_id=RID,
            usage=USAGE,
            incomplete_details=IncompleteDetails(reason="max_output_tokens"),
            response=RESPONSE,
        ),
        "response.incomplete",
        True,
    ),
    (
        events.ResponseFailed(
            response_id=RID,
            error=LmspError("generation_failed").to_problem(),
            response=RESPONSE,
        ),
        "response.failed",
        True,
    ),
    (events.ResponseCancelled(response_id=RID, response=RESPONSE), "response.cancelled", True),
    (events.StreamError(error=LmspError("internal_error").to_problem()), "error", True),
]


@pytest.mark.parametrize(("data", "name", "final"), EVENTS, ids=[e[1] for e in EVENTS])
def test_event_name_and_is_final_of_each_event(data: object, name: str, final: bool) -> None:
    event = events.ResponseEvent(id=1, data=data)  # type: ignore[arg-type]
    assert (event.event, event.is_final) == (name, final)
    assert sse_frame(event).startswith(f"id: 1\nevent: {name}\ndata: ".encode())


def test_final_events_are_the_four_final_statuses_and_error() -> None:
    assert (
        frozenset(
            {
                "response.completed",
                "response.incomplete",
                "response.failed",
                "response.cancelled",
                "error",
            }
        )
        == events.FINAL_EVENTS
    )


def test_final_event_data_carries_its_status() -> None:
    completed = events.ResponseCompleted(response_id=RID, usage=USAGE, response=RESPONSE)
    assert json.loads(completed.model_dump_json(exclude={"response"})) == {
        "response_id": RID,
        "status": "completed",
        "usage": {
            "input_tokens": 28,
            "output_tokens": 31,
            "total_tokens": 59,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    assert events.ResponseCancelled(response_id=RID, response=RESPONSE).status == "cancelled"
    assert events.ResponseCreated(response_id=RID, response=RESPONSE).status == "in_progress"


# --- ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["resp", "msg", "fc", "call", "rs", "task"])
def test_new_id_is_the_prefix_and_a_26_character_ulid(prefix: str) -> None:
    value = new_id(prefix)  # type: ignore[arg-type]
    head, _, ulid = value.partition("_")
    assert head == prefix
    assert ULID.match(ulid), value
    assert len(value) == len(prefix) + 1 + 26


def test_new_ids_are_unique_and_increasing() -> None:
    ids = [new_id("resp") for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert ids == sorted(ids)
