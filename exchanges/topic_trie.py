"""A trie of topic binding patterns (RabbitMQ's semantics).

Words are separated by ``.``; ``*`` matches exactly one word, ``#`` zero or more; the empty routing
key is zero words and empty words count (``a.`` is ``a`` then an empty word). Matching walks the
trie along the key, so its cost depends on the key and the patterns that share its prefixes, never
on the total number of bindings.
"""

from __future__ import annotations

from collections.abc import Hashable

from .dest_set import DestSet, added, removed

__all__ = ["TopicTrie", "split_words"]


def split_words(key: str) -> list[str]:
    return key.split(".") if key else []


class TopicTrie:
    """Nodes are numbers (the root is 0), so the trie holds no object per node: ``_children[n]``
    is node n's dict of words (``*`` and ``#`` among them) to its children's numbers, or None;
    ``_values[n]`` its values, or None: a tuple while they are few (``dest_set``: most patterns
    lead to one queue, and a tuple of one costs a quarter of a dict of one), a dict past that.
    Numbers of pruned nodes are reused (``_free``).

    Why numbers: a node object with its two dicts made the trie 2.5 objects the cyclic garbage
    collector tracks per binding, and a full collection walked all of them (~0.2 s with 100k
    topic bindings). A dict of strings to ints is not tracked at all, so what the collector still
    tracks here is one container of values per pattern (benchmarks/RESULTS.md, "Topic bindings and the
    garbage collector"). Lists, not dicts, map the numbers: a match indexes them at every step.
    """

    __slots__ = ("_children", "_values", "_free", "_count")

    def __init__(self) -> None:
        self._children: list[dict[str, int] | None] = [None]
        self._values: list[DestSet | None] = [None]
        self._free: list[int] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _new_node(self) -> int:
        if self._free:
            return self._free.pop()
        self._children.append(None)
        self._values.append(None)
        return len(self._children) - 1

    def add(self, pattern: str, value: Hashable, single: tuple[Hashable] | None = None) -> bool:
        """``single``: a shared tuple of ``value`` alone, for a pattern it is the first value of."""
        node = 0
        for word in split_words(pattern):
            children = self._children[node]
            if children is None:
                children = self._children[node] = {}
            child = children.get(word)
            if child is None:
                child = children[word] = self._new_node()
            node = child
        values = self._values[node]
        if values is not None and value in values:
            return False
        self._values[node] = added(values, value, single)
        self._count += 1
        return True

    def remove(self, pattern: str, value: Hashable) -> bool:
        all_children = self._children
        words = split_words(pattern)
        path = [0]
        for word in words:
            children = all_children[path[-1]]
            node = None if children is None else children.get(word)
            if node is None:
                return False
            path.append(node)
        values = self._values[path[-1]]
        if values is None or value not in values:
            return False
        self._values[path[-1]] = removed(values, value)
        self._count -= 1
        for i in range(len(words), 0, -1):  # prune empty branches
            child, parent = path[i], path[i - 1]
            if self._values[child] is not None or all_children[child] is not None:
                break
            children = all_children[parent]
            del children[words[i - 1]]  # type: ignore[union-attr]
            if not children:
                all_children[parent] = None
            self._free.append(child)
        return True

    def match(self, routing_key: str) -> dict[Hashable, None]:
        out: dict[Hashable, None] = {}
        words = split_words(routing_key)
        self._walk(0, words, 0, len(words), out)
        return out

    def _walk(self, node: int, words: list[str], i: int, n: int, out: dict[Hashable, None]) -> None:
        children = self._children[node]
        if children is None:  # a leaf (or the empty root): it matches where the key ends
            if i == n:
                values = self._values[node]
                if values:
                    out.update(dict.fromkeys(values))
            return
        hash_node = children.get("#")
        if i == n:
            values = self._values[node]
            if values:
                out.update(dict.fromkeys(values))
            if hash_node is not None:
                self._walk(hash_node, words, i, n, out)
            return
        child = children.get(words[i])
        if child is not None:
            self._walk(child, words, i + 1, n, out)
        star = children.get("*")
        if star is not None:
            self._walk(star, words, i + 1, n, out)
        if hash_node is not None:
            for j in range(i, n + 1):
                self._walk(hash_node, words, j, n, out)
