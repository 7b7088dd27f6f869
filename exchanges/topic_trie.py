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


def _child(children: dict[str, int] | tuple[str, int] | None, word: str) -> int | None:
    if children is None:
        return None
    if type(children) is tuple:
        return children[1] if children[0] == word else None
    return children.get(word)  # type: ignore[union-attr]


class TopicTrie:
    """Nodes are numbers (the root is 0), so the trie holds no object per node: ``_children[n]``
    is node n's dict of words (``*`` and ``#`` among them) to its children's numbers, or the pair
    (word, child) while it has one child (most inner nodes of distinct patterns: a pair costs a
    third of a dict of one), or None;
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
        self._children: list[dict[str, int] | tuple[str, int] | None] = [None]
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
        all_children = self._children
        for word in split_words(pattern):
            children = all_children[node]
            if children is None:
                child = self._new_node()
                all_children[node] = (word, child)
            elif type(children) is tuple:
                if children[0] == word:
                    child = children[1]
                else:
                    child = self._new_node()
                    all_children[node] = {children[0]: children[1], word: child}
            else:
                found = children.get(word)  # type: ignore[union-attr]
                if found is None:
                    found = children[word] = self._new_node()  # type: ignore[index]
                child = found
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
            node = _child(all_children[path[-1]], word)
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
            if type(children) is tuple:
                all_children[parent] = None
            else:
                del children[words[i - 1]]  # type: ignore[union-attr]
                if len(children) == 1:  # type: ignore[arg-type]
                    all_children[parent] = next(iter(children.items()))  # type: ignore[union-attr]
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
        if type(children) is tuple:
            word, child = children
            if word == "#":
                if i == n:
                    values = self._values[node]
                    if values:
                        out.update(dict.fromkeys(values))
                for j in range(i, n + 1):
                    self._walk(child, words, j, n, out)
            elif i == n:
                values = self._values[node]
                if values:
                    out.update(dict.fromkeys(values))
            elif word == "*" or word == words[i]:
                self._walk(child, words, i + 1, n, out)
            return
        hash_node = children.get("#")  # type: ignore[union-attr]
        if i == n:
            values = self._values[node]
            if values:
                out.update(dict.fromkeys(values))
            if hash_node is not None:
                self._walk(hash_node, words, i, n, out)
            return
        exact = children.get(words[i])  # type: ignore[union-attr]
        if exact is not None:
            self._walk(exact, words, i + 1, n, out)
        star = children.get("*")  # type: ignore[union-attr]
        if star is not None:
            self._walk(star, words, i + 1, n, out)
        if hash_node is not None:
            for j in range(i, n + 1):
                self._walk(hash_node, words, j, n, out)
