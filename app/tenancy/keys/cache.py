"""A bounded least-recently-used map: the key cache's storage.

Every entry costs memory a client can make us spend (a random well-formed key is one
entry), so the map holds at most `capacity` entries and drops the least recently used
one when full, never all of them at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class LruMap(Generic[V]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: OrderedDict[str, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def pop(self, key: str) -> None:
        self._items.pop(key, None)

    def items(self) -> Iterator[tuple[str, V]]:
        return iter(list(self._items.items()))

    def clear(self) -> None:
        self._items.clear()
