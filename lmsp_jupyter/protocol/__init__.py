"""LMSP 1.0 wire objects: pure data and validation, imported by every layer above."""

from .errors import PROBLEM_TYPES, LmspError, Problem, ProblemCode
from .events import FINAL_EVENTS, ResponseEvent
from .ids import new_id
from .items import InputItem, OutputItem
from .models import LMSP_VERSION, Model, ModelList, ServiceDocument
from .requests import ResponseRequest, parse_json_body, parse_response_request
from .responses import Response, Usage

__all__ = [
    "FINAL_EVENTS",
    "LMSP_VERSION",
    "PROBLEM_TYPES",
    "InputItem",
    "LmspError",
    "Model",
    "ModelList",
    "OutputItem",
    "Problem",
    "ProblemCode",
    "Response",
    "ResponseEvent",
    "ResponseRequest",
    "ServiceDocument",
    "Usage",
    "new_id",
    "parse_json_body",
    "parse_response_request",
]
