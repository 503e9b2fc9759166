"""List, then watch, one kind of object in a thread: the loop the activator and the operator share.

The Kubernetes client blocks, so each `ListWatch` runs in a thread of its own. It lists (paged),
hands the whole list over, watches from the list's resourceVersion, and lists again when the watch
expires (410 Gone) or fails. What it delivers are plain dicts, in that thread; callers publish into
their event loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


class ListWatch:
    """List one kind, then watch it from the list's resourceVersion; list again when the watch expires.

    Runs in its own thread (`run`): the Kubernetes client blocks. `on_list(items)` takes each full
    list, `on_event(type, object)` each change, both as plain dicts, in that thread.
    """

    def __init__(
        self,
        *,
        kind: str,
        list_function: Callable[..., Any],
        label_selector: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        watch_timeout_s: int = 300,
        retry_s: float = 2.0,
        page_size: int = 500,
    ) -> None:
        """Watch `kind` through `list_function` (`list_*_for_all_namespaces`) with `label_selector`."""
        self.kind = kind
        self._list_function = list_function
        self._label_selector = label_selector
        self._on_list = on_list
        self._on_event = on_event
        self._watch_timeout_s = watch_timeout_s
        self._retry_s = retry_s
        self._page_size = page_size
        self._watch: watch.Watch | None = None

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set; errors are logged and followed by a new list."""
        while not stop.is_set():
            try:
                items, resource_version = self._list()
                self._on_list(items)
                self._watch_from(resource_version, stop)
            except ApiException as error:
                if stop.is_set():
                    return
                if error.status != 410:
                    log.warning(
                        "watching %s failed: %s; listing again in %g s", self.kind, error, self._retry_s
                    )
                    stop.wait(self._retry_s)
                # 410 Gone: the resourceVersion expired; list again at once.
            except Exception as error:  # noqa: BLE001 - a watch thread must outlive any one failure
                if stop.is_set():  # the stop broke the watch's connection
                    return
                log.warning("watching %s failed: %r; listing again in %g s", self.kind, error, self._retry_s)
                stop.wait(self._retry_s)

    def stop(self) -> None:
        """Make a blocked watch return at its next event."""
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        continue_token: str | None = None
        while True:
            response = self._list_function(
                label_selector=self._label_selector,
                limit=self._page_size,
                _continue=continue_token,
                _preload_content=False,
            )
            page = json.loads(response.data)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            continue_token = metadata.get("continue") or None
            if continue_token is None:
                return items, str(metadata.get("resourceVersion", ""))

    def _watch_from(self, resource_version: str, stop: threading.Event) -> None:
        while not stop.is_set():
            self._watch = watch.Watch()  # type: ignore[no-untyped-call]
            if stop.is_set():  # stopped while the watch was made: its stop() missed this one
                return
            # timeout_seconds: the server ends the watch after it (the client then retries
            # nothing itself), and it is resumed here from the last resourceVersion seen. The
            # client's own timeout, a little longer, ends a watch whose connection died silently.
            for event in self._watch.stream(  # type: ignore[no-untyped-call]
                self._list_function,
                label_selector=self._label_selector,
                resource_version=resource_version,
                timeout_seconds=self._watch_timeout_s,
                allow_watch_bookmarks=True,
                _request_timeout=self._watch_timeout_s + 30,
            ):
                if stop.is_set():
                    return
                obj: dict[str, Any] = event["raw_object"]
                resource_version = str(_metadata(obj).get("resourceVersion", resource_version))
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(event["type"], obj)
