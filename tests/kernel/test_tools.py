"""``@tool``: the JSON Schema of a function's parameters, its description, and running a call."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

import lmsp_jupyter
from lmsp_jupyter.kernel.tools import DECLINED, Tool, tool


class Point(BaseModel):
    x: float
    y: float


def test_schema_from_annotations_defaults_and_args_section() -> None:
    @tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c", days: int | None = None) -> str:
        """The weather of a city.

        Args:
            city: The city's name.
            unit: Celsius or Fahrenheit.
        """
        return city

    assert get_weather.definition() == {
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city's name."},
                "unit": {
                    "type": "string",
                    "enum": ["c", "f"],
                    "default": "c",
                    "description": "Celsius or Fahrenheit.",
                },
                "days": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    }


def test_nested_models_lists_and_unannotated_parameters() -> None:
    @tool
    def place(point: Point, tags: list[str], extra=1):  # type: ignore[no-untyped-def]
        return None

    assert place.parameters == {
        "$defs": {
            "Point": {
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
                "title": "Point",
                "type": "object",
            }
        },
        "type": "object",
        "properties": {
            "point": {"$ref": "#/$defs/Point"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "extra": {"default": 1},
        },
        "required": ["point", "tags"],
        "additionalProperties": False,
    }
    assert "description" not in place.definition()


def test_decorator_options_name_description_policy() -> None:
    @lmsp_jupyter.tool(policy="always", name="weather.now", description="Now.")
    def get_weather(city: str) -> str:
        """Not this."""
        return city

    assert isinstance(get_weather, Tool)
    assert (get_weather.name, get_weather.description, get_weather.policy) == (
        "weather.now",
        "Now.",
        "always",
    )
    assert get_weather("Paris") == "Paris"
    assert get_weather.__doc__ == "Not this."


def nothing() -> None:
    """Do nothing."""


def test_default_policy_is_ask() -> None:
    assert tool(nothing).policy == "ask"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": "sometimes"}, "policy must be one of ask, always, never, not 'sometimes'"),
        ({"name": "a b"}, "tool name 'a b' must be 1-64 of A-Z a-z 0-9 _ . -"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message.replace('.', '[.]')}$"):
        tool(**options)(nothing)


def test_star_parameters_are_refused() -> None:
    def many(*args: int) -> None:
        pass

    def named(**kwargs: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"^a tool takes named parameters only, not \*args$"):
        tool(many)
    with pytest.raises(TypeError, match=r"^a tool takes named parameters only, not \*\*kwargs$"):
        tool(named)


def test_run_passes_validated_arguments_and_serialises_the_result() -> None:
    calls: list[tuple[Point, int]] = []

    @tool
    def move(point: Point, by: int = 1, /) -> dict[str, float]:
        calls.append((point, by))
        return {"x": point.x + by}

    assert move.run('{"point": {"x": 1, "y": 2}, "by": 3}') == '{"x":4.0}'
    assert calls == [(Point(x=1, y=2), 3)]


def test_run_returns_strings_as_they_are() -> None:
    def sky(city: str) -> str:
        return f"sunny in {city}"

    assert tool(sky).run('{"city": "Paris"}') == "sunny in Paris"


def test_an_exception_becomes_the_output() -> None:
    def fail(city: str) -> str:
        raise ValueError(f"no weather for {city}")

    assert tool(fail).run('{"city": "Oz"}') == "error: ValueError: no weather for Oz"


@pytest.mark.parametrize(
    ("arguments", "output"),
    [
        (
            '{"city": ',
            "error: the arguments are not valid JSON: Expecting value: line 1 column 10 (char 9)",
        ),
        ("[1]", "error: the arguments are not a JSON object: [1]"),
        (
            '{"town": "Paris"}',
            "error: the arguments do not fit weather: city: Field required; "
            "town: Extra inputs are not permitted",
        ),
        (
            '{"city": 3}',
            "error: the arguments do not fit weather: city: Input should be a valid string",
        ),
    ],
)
def test_arguments_that_do_not_fit_become_the_output(arguments: str, output: str) -> None:
    ran: list[str] = []

    @tool
    def weather(city: str) -> str:
        ran.append(city)
        return city

    assert weather.run(arguments) == output
    assert ran == []


def test_declined_text() -> None:
    assert DECLINED == "The user declined to run this function."
