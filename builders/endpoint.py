"""A source's endpoint URL, checked before any request (pure).

The s3 store and a Hugging Face Hub are named by a base URL in the spec. Both are read the same way:
http or https, a host, an optional port; no credentials in it (a password in a URL ends up in
logs and messages), no query or fragment. An S3 endpoint has no path; a Hub may sit under one.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from tailpilot.builders.errors import UNSUPPORTED_URI, BuildError


def checked_endpoint(url: str, *, what: str, allow_path: bool) -> SplitResult:
    """`url`'s parts, or UnsupportedModelUri naming `what` ("s3 endpoint", "Hub endpoint").

    Raises:
        BuildError: UnsupportedModelUri for credentials, a bad port, another scheme, no host, a
            query or fragment, or a path where none is allowed.
    """
    parts = urlsplit(url)
    if "@" in parts.netloc:  # said without repeating it: what precedes the @ may be a password
        raise BuildError(UNSUPPORTED_URI, f"the {what} may not carry credentials (user:password@)")
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError as exc:
        raise BuildError(UNSUPPORTED_URI, f"{what} {url!r} has an invalid port") from exc
    path_ok = allow_path or parts.path in {"", "/"}
    if (
        parts.scheme not in {"http", "https"}
        or not parts.hostname
        or parts.query
        or parts.fragment
        or not path_ok
    ):
        shape = "http(s)://host[:port][/path]" if allow_path else "https://host[:port] or http://host[:port]"
        raise BuildError(UNSUPPORTED_URI, f"{what} {url!r} is not {shape}")
    return parts
