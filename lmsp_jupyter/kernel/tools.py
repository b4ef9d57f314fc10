"""``@tool``: a typed Python function the model may call, with the user's approval policy."""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import CoreSchema, to_json

from .docstrings import parse_docstring
from .state import RunsIn

ToolPolicy = Literal["ask", "always", "never"]

#: The output the model gets for a call the user declined (or a ``never`` tool).
DECLINED = "The user declined to run this function."

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_POLICIES = ("ask", "always", "never")


class _UntitledSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema without the titles it derives from field names."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


class Tool:
    """A function tool (LMSP 1.0 section 6.5) run in this kernel; calling it calls the function."""

    #: Where an approved call runs (see :mod:`.notebook_tools` for the other place).
    runs_in: RunsIn = "kernel"

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        policy: ToolPolicy = "ask",
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        if policy not in _POLICIES:
            raise ValueError(f"policy must be one of {', '.join(_POLICIES)}, not {policy!r}")
        self.name = name or function.__name__
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must be 1-64 of A-Z a-z 0-9 _ . -")
        doc = parse_docstring(function.__doc__)
        self.function = function
        self.policy: ToolPolicy = policy
        self.description = doc.description if description is None else description
        self._arguments, self._positional = _arguments_model(function, doc.parameters)
        schema = self._arguments.model_json_schema(schema_generator=_UntitledSchema)
        schema.pop("title", None)
        self.parameters: dict[str, Any] = schema
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name} policy={self.policy}>"

    def definition(self) -> dict[str, Any]:
        """The tool as a request's ``tools`` entry."""
        definition: dict[str, Any] = {"type": "function", "name": self.name}
        if self.description:
            definition["description"] = self.description
        definition["parameters"] = self.parameters
        return definition

    def run(self, arguments: str) -> str:
        """Run the function on the model's JSON ``arguments``; every failure becomes the output."""
        try:
            values = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not valid JSON: {exc}"
        if not isinstance(values, dict):
            return f"error: the arguments are not a JSON object: {arguments}"
        try:
            parsed = self._arguments.model_validate(values)
        except ValidationError as exc:
            return f"error: the arguments do not fit {self.name}: {_first_problems(exc)}"
        given = {key: getattr(parsed, key) for key in type(parsed).model_fields}
        positional = [given.pop(key) for key in self._positional]
        try:
            result = self.function(*positional, **given)
        except Exception as exc:
            return f"error: {type(exc).__name__}: {exc}"
        return result if isinstance(result, str) else to_json(result, fallback=str).decode()


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, policy: ToolPolicy = "ask", name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    policy: ToolPolicy = "ask",
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function a tool: ``@tool`` or ``@tool(policy="always", name=..., ...)``.

    The parameters' JSON Schema comes from the annotations, the description from the
    docstring's first paragraph, each parameter's description from its "Args:" section.
    ``policy``: ``ask`` waits for the user's approval, ``always`` runs at once, ``never`` declines.
    """

    def make(function: Callable[..., Any]) -> Tool:
        return Tool(function, policy=policy, name=name, description=description)

    return make if function is None else make(function)


def _arguments_model(
    function: Callable[..., Any], descriptions: dict[str, str]
) -> tuple[type[BaseModel], tuple[str, ...]]:
    """A pydantic model of the function's parameters, and the names passed by position."""
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    positional: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind == parameter.VAR_POSITIONAL else "**"
            raise TypeError(f"a tool takes named parameters only, not {stars}{parameter.name}")
        if parameter.kind == parameter.POSITIONAL_ONLY:
            positional.append(parameter.name)
        default = ... if parameter.default is parameter.empty else parameter.default
        field = Field(default, description=descriptions.get(parameter.name))
        fields[parameter.name] = (hints.get(parameter.name, Any), field)
    config = ConfigDict(extra="forbid")
    model = create_model(f"{function.__name__}_arguments", __config__=config, **fields)
    return model, tuple(positional)


def _first_problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}"
        for problem in error.errors(include_url=False)
    )
