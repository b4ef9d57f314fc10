"""``POST /lmsp/v1/embeddings``: OpenAI's Embeddings (LMSP 1.0 section 11.5)."""

from __future__ import annotations

from ..protocol.embeddings import EmbeddingRequest, embedding_list
from ..protocol.requests import keep_alive_extension, validate_request
from ..service.embeddings import check_dimensions
from .base import LmspHandler
from .operations import Operation, json_reply, ref


class EmbeddingsHandler(LmspHandler):
    """``POST /lmsp/v1/embeddings``: a normalized vector per text, floats or base64."""

    operations = {
        "post": Operation(
            "createEmbeddings",
            "OpenAI's Embeddings, by a model with the `embedding` capability",
            "embeddings",
            {"200": json_reply(ref("EmbeddingList"), "A vector per text, in order.")},
            scope="responses:write",
            errors=(404, 413, 415),
            body="EmbeddingRequest",
        )
    }

    async def post(self) -> None:
        request = validate_request(EmbeddingRequest, self.json_body())
        embeddings = await self.embeddings.embed(
            self.models.entry(request.model),
            request.texts(),
            keep_alive=keep_alive_extension(request.extensions),
        )
        check_dimensions(embeddings, request.dimensions)
        answer = embedding_list(
            request.model, embeddings.vectors, embeddings.tokens, request.encoding_format
        )
        self.write_model(answer)
