"""A tool's description and parameter descriptions come from its docstring."""

from __future__ import annotations

from lmsp_jupyter.kernel.docstrings import Docstring, parse_docstring


def test_description_is_the_first_paragraph_joined() -> None:
    doc = """Find the weather
    of a city.

    More about it.
    """
    assert parse_docstring(doc) == Docstring("Find the weather of a city.", {})


def test_no_docstring_gives_nothing() -> None:
    assert parse_docstring(None) == Docstring("", {})


def test_google_args_with_types_and_continuation_lines() -> None:
    doc = """Weather.

    Args:
        city (str): The city,
            in English.
        unit: Celsius or Fahrenheit.

    Returns:
        unit: not a parameter.
    """
    assert parse_docstring(doc) == Docstring(
        "Weather.", {"city": "The city, in English.", "unit": "Celsius or Fahrenheit."}
    )


def test_args_section_right_after_the_summary_ends_the_description() -> None:
    doc = """Weather.
    Args:
        city: The city.
    """
    assert parse_docstring(doc) == Docstring("Weather.", {"city": "The city."})


def test_numpy_parameters_up_to_the_next_section() -> None:
    doc = """Weather.

    Parameters
    ----------
    city : str
        The city,
        in English.
    unit
        Celsius or Fahrenheit.

    Returns
    -------
    str
        The weather.
    """
    assert parse_docstring(doc) == Docstring(
        "Weather.", {"city": "The city, in English.", "unit": "Celsius or Fahrenheit."}
    )
