"""A trie of topic binding patterns (RabbitMQ's semantics).

Words are separated by ``.``; ``*`` matches exactly one word, ``#`` zero or more; the empty routing
key is zero words and empty words count (``a.`` is ``a`` then an empty word). Matching walks the
trie along the key, so its cost depends on the key and the patterns that share its prefixes, never
on the total number of bindings.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["TopicTrie", "split_words"]


def split_words(key: str) -> list[str]:
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.values: dict[Hashable, None] = {}


class TopicTrie:
    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, pattern: str, value: Hashable) -> bool:
        node = self._root
        for word in split_words(pattern):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        if value in node.values:
            return False
        node.values[value] = None
        self._count += 1
        return True

    def remove(self, pattern: str, value: Hashable) -> bool:
        path = [self._root]
        words = split_words(pattern)
        node = self._root
        for word in words:
            node = node.children.get(word)  # type: ignore[assignment]
            if node is None:
                return False
            path.append(node)
        if value not in node.values:
            return False
        del node.values[value]
        self._count -= 1
        for i in range(len(words), 0, -1):  # prune empty branches
            child = path[i]
            if child.values or child.children:
                break
            del path[i - 1].children[words[i - 1]]
        return True

    def match(self, routing_key: str) -> dict[Hashable, None]:
        out: dict[Hashable, None] = {}
        words = split_words(routing_key)
        self._walk(self._root, words, 0, len(words), out)
        return out

    def _walk(self, node: _Node, words: list[str], i: int, n: int, out: dict[Hashable, None]) -> None:
        children = node.children
        hash_node = children.get("#")
        if i == n:
            if node.values:
                out.update(node.values)
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
