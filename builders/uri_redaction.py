"""Secrets a model URL can carry, kept out of what the build reports (pure).

A build's failure message becomes the EngineReady condition and a Warning Event, which more people
can read than the InferenceService's spec (Events are often open to a whole namespace, and
collected outside the cluster). An https URL may carry a credential: a presigned URL's signature
and token in its query string (`X-Amz-Signature=...`, `sig=...`), or a user and password before its
host. The build therefore reports each URL of its request as `scheme://host/path` with the query
and the password replaced, and removes the query's values wherever else they appear in a message
(an HTTP client quotes the URL it requested in its own errors).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit, urlunsplit

#: What stands in for a removed secret.
REDACTED = "REDACTED"
#: Query values shorter than this are not searched for elsewhere in a message (a `v=1` would
#: redact every "1"); the query as a whole still is.
MIN_SECRET_LENGTH = 6


def displayed(uri: str) -> str:
    """`uri` as a report may show it: the query and a password replaced by `REDACTED`."""
    parts = urlsplit(uri)
    if not parts.query and parts.password is None:
        return uri
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{REDACTED}@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, REDACTED if parts.query else "", ""))


def redacted(text: str, uris: Iterable[str | None]) -> str:
    """`text` without the secrets of `uris`: each URL displayed, its query values and password removed."""
    for uri in uris:
        if not uri:
            continue
        parts = urlsplit(uri)
        if not parts.query and parts.password is None:
            continue
        text = text.replace(uri, displayed(uri))
        if parts.query:
            text = text.replace(parts.query, REDACTED)
        secrets = [value for _, value in parse_qsl(parts.query, keep_blank_values=False)]
        if parts.password is not None:
            secrets.append(parts.password)
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) < MIN_SECRET_LENGTH:
                continue
            for form in {secret, quote(secret, safe=""), quote_plus(secret, safe="")}:
                text = text.replace(form, REDACTED)
    return text
