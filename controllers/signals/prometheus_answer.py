"""What the operator says about a Prometheus answer it cannot use: fixed words, never the answer (pure).

Why a query failed goes onto the service's status (conditions, status.canary) and its Events,
which the service's tenant reads. The answer came from wherever the URL led, and from a query that
may have selected other tenants' series, so none of its text is copied there: not the body, not
Prometheus' error message (which quotes label sets, e.g. of the duplicate series of a failed
match), not a header taken as it is. What is said is built only from facts the operator measured
or checked against a fixed list: the HTTP status, the media type when it is a common one, the
size, Prometheus' error type and result type when they are the API's own, and a value only when
it reads as a number. The operator's log keeps Prometheus' own words for the
platform team (`observe`).
"""

from __future__ import annotations

import re
from typing import Any, Final

#: errorType values of Prometheus' HTTP API.
ERROR_TYPES: Final = frozenset(
    {"bad_data", "timeout", "canceled", "execution", "internal", "unavailable", "not_found", "not_acceptable"}
)
#: resultType values of an instant or range query's answer.
RESULT_TYPES: Final = frozenset({"matrix", "vector", "scalar", "string"})

#: Media types named as they are: what a wrong URL usually answers. Any other is not quoted, since
#: a header of the standard shape can still carry a hundred characters the other end chose.
MEDIA_TYPES: Final = frozenset(
    {
        "application/json",
        "application/problem+json",
        "application/xml",
        "application/octet-stream",
        "application/openmetrics-text",
        "application/x-protobuf",
        "text/html",
        "text/plain",
        "text/xml",
        "text/csv",
    }
)
#: A sample value as Prometheus writes it (a decimal, or Inf / NaN), short enough to quote.
_NUMBER = re.compile(r"^[+-]?(Inf|NaN|[0-9][0-9.]{0,24}([eE][+-]?[0-9]{1,3})?)$")


def media_type(content_type: str | None) -> str:
    """The answer's media type (`text/html`) when it is one of `MEDIA_TYPES`; else a fixed phrase."""
    if not content_type:
        return "no content type"
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind if kind in MEDIA_TYPES else "another content type"


def not_an_api_answer(*, url: str, status: int, content_type: str | None, size: int) -> str:
    """An answer that is not Prometheus' API JSON, described by its status, media type and size."""
    return (
        f"{url} answered HTTP {status} ({media_type(content_type)}, {size} bytes): "
        "not a Prometheus API answer"
    )


def error_type(body: dict[str, Any]) -> str:
    """Prometheus' errorType of an error answer, when it is one of the API's; else a fixed phrase."""
    kind = body.get("errorType")
    return kind if isinstance(kind, str) and kind in ERROR_TYPES else "no known error type"


def refusal(body: dict[str, Any]) -> str:
    """An error answer in words: its error type only (the operator's log has Prometheus' message)."""
    return f"Prometheus refused the query ({error_type(body)}); its message is in the operator's log"


def result_kind(data: object) -> str:
    """The answer's result type when it is one of the API's ("malformed" otherwise)."""
    kind = data.get("resultType") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) and kind in RESULT_TYPES else "malformed"


def value_words(raw: object) -> str:
    """A sample value for a message: quoted when it reads as a number, else a fixed phrase."""
    if isinstance(raw, str) and _NUMBER.match(raw):
        return repr(raw)
    return "a value that is not a number"
