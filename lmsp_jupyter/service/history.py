"""Stored responses: the conversation a ``previous_response_id`` continues, the items an
``item_reference`` names, and the responses kept with ``store: true``."""

from __future__ import annotations

from pydantic import TypeAdapter

from ..protocol.errors import LmspError
from ..protocol.items import InputItem, ItemReference, as_input_item
from ..protocol.requests import ResponseRequest
from ..protocol.responses import Response
from .run import ResponseRun
from .store.records import ResponseRecords

_CONTEXT = TypeAdapter(list[InputItem])


class ResponseHistory:
    """The stored responses of every owner (none kept without ``records``)."""

    def __init__(self, records: ResponseRecords | None) -> None:
        self.records = records

    def previous(self, request: ResponseRequest, owner: str) -> list[InputItem]:
        """The stored input and output that ``previous_response_id`` continues."""
        if request.previous_response_id is None or self.records is None:
            return []
        row = self.records.get(request.previous_response_id, owner)
        if row is None:
            raise LmspError(
                "response_not_found",
                f"no stored response {request.previous_response_id!r}",
                param="previous_response_id",
            )
        response = Response.model_validate_json(row["response"])
        return [*_CONTEXT.validate_json(row["context"]), *map(as_input_item, response.output)]

    def resolved(self, items: list[InputItem], owner: str) -> list[InputItem]:
        """``items`` with each ``item_reference`` replaced by the stored item it names."""
        resolved: list[InputItem] = []
        for index, item in enumerate(items):
            if not isinstance(item, ItemReference):
                resolved.append(item)
                continue
            found = self._stored_item(item.id, owner)
            if found is None:
                raise LmspError(
                    "response_not_found",
                    f"no stored response has an item {item.id!r}",
                    param=f"input[{index}].id",
                )
            resolved.append(found)
        return resolved

    def _stored_item(self, item_id: str, owner: str) -> InputItem | None:
        if self.records is None:
            return None
        for row in self.records.with_item(item_id, owner):
            response = Response.model_validate_json(row["response"])
            for output in response.output:
                if output.id == item_id:
                    return as_input_item(output)
            for known in _CONTEXT.validate_json(row["context"]):
                if getattr(known, "id", None) == item_id:
                    return known
        return None

    def stored(self, response_id: str, owner: str) -> Response:
        """A response kept with ``store: true``; unknown or another owner's →
        ``response_not_found``."""
        row = self.records.get(response_id, owner) if self.records is not None else None
        if row is None:
            raise LmspError("response_not_found", f"no stored response {response_id!r}")
        return Response.model_validate_json(row["response"])

    def keep(self, run: ResponseRun) -> None:
        """Store ``run``'s response and the context it answered (``store: true``)."""
        assert self.records is not None
        self.records.save(
            response_id=run.id,
            owner=run.owner,
            at=run.created_at,
            context=_CONTEXT.dump_json(run.context).decode(),
            response=run.response().model_dump_json(),
        )
