"""Structured output: a final answer checked against the job's ``output_schema``.

The final answer must be one JSON value (a fenced ```json block is accepted)
that validates against the JSON Schema (the ``jsonschema`` library, the
dialect the schema's ``$schema`` names, Draft 2020-12 by default).  The agent
loop gives the model one repair turn with the problem; a second failure ends
the job ``failed`` with it (:mod:`child.agent`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n\s*```\s*$", re.S)


def parse_answer(text: str) -> Any:
    """The JSON value of a final answer: the whole text, or the inside of one code fence.

    Raises ``ValueError`` (with the JSON decoder's line and column) when it is no JSON.
    """
    match = _FENCE.match(text or "")
    body = match.group(1) if match else (text or "")
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the final answer is not JSON ({exc})") from None


def check(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """``(value, None)`` when ``text`` is JSON valid against ``schema``, else ``(None, problem)``.

    ``problem`` names where in the answer it failed (a JSON path such as
    ``$.items[2].name``) and why — the most relevant error (``jsonschema.exceptions.best_match``).
    """
    import jsonschema

    try:
        value = parse_answer(text)
    except ValueError as exc:
        return None, str(exc)
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return value, None
    return None, f"at {error.json_path}: {error.message}"


def repair_prompt(problem: str, schema: dict[str, Any]) -> str:
    """The user message of the one repair turn."""
    return ("Your final answer must be a single JSON value that validates against this JSON Schema, "
            f"and it does not: {problem}.\nSchema:\n{json.dumps(schema, ensure_ascii=False)}\n"
            "Reply with the corrected JSON only (no other text, call no tool).")
