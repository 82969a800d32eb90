"""A small bounded cache that several threads share (the window's estimator thread and its thread pool).

Entries are keyed by a hashable key and anchored to the objects they were computed from: a hit needs the very same
objects (`is`), so an id() reused by a new object after the old one was freed is never mistaken for a hit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class AnchoredCache(Generic[V]):
    """At most `size` entries, the oldest dropped first; every method is safe to call from any thread."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a cache holds at least one entry")
        self._size = size
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[tuple[object, ...], V]] = {}

    def get_or_compute(self, key: Hashable, anchors: tuple[object, ...], compute: Callable[[], V]) -> V:
        """The cached value for `key` computed from `anchors`, else `compute()` (outside the lock), stored."""
        with self._lock:
            hit = self._items.get(key)
        if (
            hit is not None
            and len(hit[0]) == len(anchors)
            and all(a is b for a, b in zip(hit[0], anchors, strict=True))
        ):
            return hit[1]
        value = compute()
        with self._lock:
            self._items.pop(key, None)
            while len(self._items) >= self._size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = (anchors, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
