"""Section 11.1 fields the service resolves itself: ``item_reference`` to an item of a stored
response, ``instructions`` (not carried on by ``previous_response_id``) and ``metadata`` on the
response and on its task (scripted engine; a real SQLite store, and a PostgreSQL one)."""

from __future__ import annotations

import pytest

from lmsp_jupyter.engine.generation import CancelToken
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.events import ResponseCompleted
from lmsp_jupyter.protocol.items import OutputMessage
from lmsp_jupyter.service.responses import ResponseService
from tests.conftest import Stores
from tests.doubles import ScriptedEngine
from tests.service.helpers import request, services


async def stored_answer(engine: ScriptedEngine, stores: Stores) -> tuple[ResponseService, str]:
    responses, _ = services(engine, stores.open(stores.new()))
    run = await responses.start(request(input="The sky?", store=True))
    response = await responses.complete(run)
    (message,) = response.output
    assert isinstance(message, OutputMessage) and message.id is not None
    return responses, message.id


async def test_an_item_reference_brings_the_stored_item_into_the_prompt(stores: Stores) -> None:
    engine = ScriptedEngine(deltas=("Blue", "."))
    responses, item_id = await stored_answer(engine, stores)
    reference = {"type": "item_reference", "id": item_id}
    run = await responses.start(request(input=[reference, {"role": "user", "content": "Why?"}]))
    assert [(m.role, m.content) for m in engine.prompts[-1]] == [
        ("assistant", "Blue."),
        ("user", "Why?"),
    ]
    assert run.request.input[0].type == "item_reference"


async def test_an_unknown_item_reference_is_response_not_found(stores: Stores) -> None:
    responses, _ = await stored_answer(ScriptedEngine(deltas=("x",)), stores)
    reference = {"type": "item_reference", "id": "msg_01J8M6Q4W2T7N5R3V9X1Z8B0DF"}
    with pytest.raises(LmspError) as info:
        await responses.start(request(input=[reference]))
    assert (info.value.code, info.value.status, info.value.param) == (
        "response_not_found",
        404,
        "input[0].id",
    )


async def test_instructions_lead_the_prompt_and_are_not_carried_on(stores: Stores) -> None:
    engine = ScriptedEngine(deltas=("Hi",))
    responses, _ = services(engine, stores.open(stores.new()))
    responses.models.conversations = True  # responses are stored here
    first = await responses.complete(
        await responses.start(request(instructions="Be brief.", store=True))
    )
    assert [(m.role, m.content) for m in engine.prompts[-1]] == [
        ("system", "Be brief."),
        ("user", "Hi"),
    ]
    assert first.instructions == "Be brief."
    await responses.start(request(previous_response_id=first.id, input="And?"))
    assert [m.role for m in engine.prompts[-1]] == ["user", "assistant", "user"]


async def test_metadata_is_on_the_response_and_on_its_task(stores: Stores) -> None:
    responses, tasks = services(ScriptedEngine(deltas=("x",)), stores.open(stores.new()))
    metadata = {"notebook": "a.ipynb", "cell": "3"}
    run = await responses.start(request(metadata=metadata))
    events = [event async for event in responses.events(run, CancelToken())]
    final = events[-1].data
    assert isinstance(final, ResponseCompleted) and final.response is not None
    assert final.response.metadata == metadata
    task = await tasks.create(
        {
            "type": "response",
            "request": {
                **request().model_dump(exclude_none=True, by_alias=True),
                "metadata": metadata,
            },
        },
        "local",
    )
    assert task.metadata == metadata
