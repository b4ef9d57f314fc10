"""What the protocol suite's tests share: a response id and the response it names, running."""

from __future__ import annotations

from lmsp_jupyter.protocol.responses import Response

#: A response id of the spec's shape (``resp_`` and a ULID).
RID = "resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF"
#: The response ``RID``, as a stream's events carry it while it runs.
RESPONSE = Response(id=RID, created_at=1794200000, status="in_progress", model="m")
