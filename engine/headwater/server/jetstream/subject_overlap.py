"""Token tries that answer overlap questions about many subjects at once.

:func:`.subject_rules.subjects_collide` and :func:`.subject_rules.is_subset_match` compare two
subjects; checking every pair of a 20,000-subject stream config that way is quadratic and held
the event loop for minutes. The indexes here answer "does this subject collide with (or is it
a subset of) any stored one?" by walking a trie of the stored subjects' tokens, visiting only
the branches the query's tokens can match: near-linear for real configs.

They reproduce the pairwise functions exactly (tests compare them on random inputs), quirks
included: a token that merely starts with ``*`` counts as a wildcard in some comparisons, an
empty token matches nothing, and a ``>`` that is not the last token still ends a pattern the
way the reference's loops let it. The query is always a valid subject (callers check validity
first); stored subjects may be anything.

Worst case: a query full of wildcards against stored subjects that share no prefix visits the
whole trie, as the pairwise loop would; configs built to defeat the index stay as slow as
nats-server's pairwise check, not slower.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CollisionIndex", "SubsetIndex"]


class _Node:
    """A trie node: children by token, how many stored subjects end here and below."""

    __slots__ = ("children", "ends", "fwc_ends", "total", "wild_keys")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        #: Children whose token starts with ``*`` or ``>`` (wildcard-like in some rules).
        self.wild_keys: set[str] = set()
        self.ends = 0  # subjects ending exactly here
        self.fwc_ends = 0  # of those, subjects with a bare ">" token somewhere
        self.total = 0  # subjects ending here or below


def _insert(root: _Node, tokens: list[str], count: int, has_fwc: bool) -> None:
    node = root
    node.total += count
    for token in tokens:
        child = node.children.get(token)
        if child is None:
            child = node.children[token] = _Node()
            if token[:1] in ("*", ">"):
                node.wild_keys.add(token)
        node = child
        node.total += count
    node.ends += count
    if has_fwc:
        node.fwc_ends += count


def _kinds(tokens: list[str]) -> tuple[bool, bool]:
    """(has a bare ``*`` token, has a bare ``>`` token)."""
    return "*" in tokens, ">" in tokens


class CollisionIndex:
    """Stored subjects; :meth:`collides` is ``any(subjects_collide(q, s) for s in stored)``."""

    def __init__(self, subjects: Iterable[str] = ()) -> None:
        self._exact: dict[str, int] = {}
        self._literals = _Node()  # subjects without a bare wildcard token
        self._wildcards = _Node()  # subjects with one
        for subject in subjects:
            self.add(subject)

    def add(self, subject: str) -> None:
        self._exact[subject] = self._exact.get(subject, 0) + 1
        tokens = subject.split(".")
        pwc, fwc = _kinds(tokens)
        if pwc or fwc:
            _insert(self._wildcards, tokens, 1, fwc)
        else:
            _insert(self._literals, tokens, 1, False)

    def collides(self, query: str) -> bool:
        """Whether the valid subject ``query`` collides with a stored subject."""
        if query in self._exact:
            return True
        tokens = query.split(".")
        pwc, fwc = _kinds(tokens)
        if not (pwc or fwc):
            # Literal vs literal collide only when equal (handled above).
            return _literal_in_patterns(self._wildcards, tokens, 0)
        return _pattern_over_literals(self._literals, tokens, 0) or _pattern_vs_patterns(
            self._wildcards, tokens, 0, fwc
        )


def _literal_in_patterns(root: _Node, tokens: list[str], depth: int) -> bool:
    """``is_subset_match(literal query, stored pattern)`` for some stored pattern below."""
    stack = [(root, depth)]  # explicit stacks: a subject may have thousands of tokens
    while stack:
        node, depth = stack.pop()
        if depth == len(tokens):
            if node.ends > 0:
                return True
            continue
        token = tokens[depth]
        child = node.children.get(token)
        if child is not None and child.total:
            stack.append((child, depth + 1))
        for key in node.wild_keys:
            child = node.children[key]
            if not child.total:
                continue
            if key == ">":
                return True  # the pattern ends the comparison here, with tokens left to match
            if key[0] == "*" and key != token:
                stack.append((child, depth + 1))
    return False


def _pattern_over_literals(root: _Node, tokens: list[str], depth: int) -> bool:
    """``is_subset_match(stored literal, pattern query)`` for some stored literal below."""
    stack = [(root, depth)]
    while stack:
        node, depth = stack.pop()
        if depth == len(tokens):
            if node.ends > 0:
                return True
            continue
        token = tokens[depth]
        if token == ">":
            if node.total > node.ends:  # one more token at least
                return True
            continue
        if token[0] == "*":
            # An empty stored token matches nothing; no bare wildcards among literals.
            stack.extend((c, depth + 1) for k, c in node.children.items() if k and c.total)
            continue
        child = node.children.get(token)
        if child is not None and child.total > 0:
            stack.append((child, depth + 1))
    return False


def _pattern_vs_patterns(root: _Node, tokens: list[str], depth: int, query_fwc: bool) -> bool:
    """The both-wildcards rule of ``subjects_collide`` against the stored patterns below.

    Lengths must be equal, or the shorter side must hold a bare ``>``; over the common length
    every token pair must be equal or have a side starting with ``*`` or ``>``.
    """
    stack = [(root, depth)]
    while stack:
        node, depth = stack.pop()
        if depth == len(tokens):
            # Equal length, or the query is shorter and holds the ">".
            if node.ends > 0 or (query_fwc and node.total > 0):
                return True
            continue
        if depth > 0 and node.fwc_ends > 0:
            return True  # a stored pattern with ">" ended first, its tokens all matched
        token = tokens[depth]
        if token[0] in "*>":
            keys: Iterable[str] = node.children.keys()
        else:
            keys = node.wild_keys | ({token} if token in node.children else set())
        for key in keys:
            child = node.children[key]
            if key and child.total:
                stack.append((child, depth + 1))
    return False


class SubsetIndex:
    """Stored patterns, with removal; :meth:`is_subset` is ``is_subset_match`` against any."""

    def __init__(self, subjects: Iterable[str] = ()) -> None:
        self._root = _Node()
        for subject in subjects:
            self.add(subject)

    def add(self, subject: str) -> None:
        _insert(self._root, subject.split("."), 1, False)

    def remove(self, subject: str) -> None:
        """Forget one stored copy of ``subject`` (which must be stored)."""
        _insert(self._root, subject.split("."), -1, False)

    def is_subset(self, query: str) -> bool:
        """Whether the valid subject ``query`` is a subset of some stored pattern."""
        return _subset(self._root, query.split("."), 0)


def _subset(root: _Node, tokens: list[str], depth: int) -> bool:
    stack = [(root, depth)]
    while stack:
        node, depth = stack.pop()
        if depth == len(tokens):
            if node.ends > 0:
                return True
            continue
        token = tokens[depth]
        child = node.children.get(">")
        if child is not None and child.total > 0:
            return True
        if token == ">":
            continue  # only a ">" of the pattern covers it
        if token == "*":
            child = node.children.get("*")
            if child is not None and child.total > 0:
                stack.append((child, depth + 1))
            continue
        child = node.children.get(token)
        if child is not None and child.total > 0:
            stack.append((child, depth + 1))
        for key in node.wild_keys:
            if key[0] == "*" and key != token:
                child = node.children[key]
                if child.total > 0:
                    stack.append((child, depth + 1))
    return False
