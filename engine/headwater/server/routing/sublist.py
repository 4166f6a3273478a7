"""The subscription index: a token trie with a bounded cache of match results.

Layout follows nats-server's sublist (sublist.go): every trie node holds its literal children
in a dict plus two dedicated children for ``*`` and ``>``, and the subscriptions whose subject
ends there. A match walks the published subject's tokens once; at every level it also collects
the ``>`` child and branches into the ``*`` child. A trie node is reachable by exactly one
token path, and a filter matches a literal subject in at most one way, so no subscription is
ever collected twice.

Identity: subscriptions are opaque objects (see :class:`Subscriber`) and may be unhashable or
compare equal by value (dataclasses do both). The sublist keys them by ``id(sub)`` and keeps
the object as the dict value, so the object stays alive -- and its id cannot be reused --
for as long as it is inserted. A subscription's ``subject`` and ``queue`` must not change
while it is inserted. An empty-string queue counts as no queue, like a two-argument SUB.

Match cache: ``subject -> SublistResult``, bounded like nats-server's (``slCacheMax`` 1024
entries; over that, ``slCacheSweep`` drains to 256). nats-server drops arbitrary entries (Go
map order); here the oldest-inserted entries go, since a dict keeps insertion order. Results
are immutable, so a cached result can be handed to any number of callers.

Keeping the cache correct on changes: a literal subscription can only affect the cache entry
for its own subject, which is one dict lookup. A wildcard subscription (every nats client
subscribes ``_INBOX.<id>.*`` on connect) would otherwise mean scanning all cached subjects as
nats-server does, costing about a millisecond per change in Python; instead the cached subjects
are also kept in a small token trie (``_ckeys``) that is searched with the wildcard filter, so
only the cached subjects the filter matches are visited. Inserts extend those entries (copy on
write); removals drop them, to be recomputed on the next match. A change that would touch
more than ``PATCH_LIMIT`` entries empties the cache instead.

Not thread-safe: it is meant to be used from the single event-loop thread.
"""

from __future__ import annotations

from typing import Any, Protocol

from headwater.server.routing.subjects import is_literal

__all__ = ["EMPTY_RESULT", "InvalidSubjectError", "Sublist", "SublistResult", "Subscriber"]

# nats-server's cache bounds (slCacheMax / slCacheSweep in sublist.go).
CACHE_MAX = 1024
CACHE_SWEEP = 256

_PWC = "*"
_FWC = ">"
_SEP = "."
# A wildcard change matching more cached subjects than this empties the cache instead of
# fixing each entry (1-2 µs apiece in Python: a result copy, or two deletes), which for a broad
# subscription (`>`) against a full cache would cost ~2 ms. Entries are rebuilt on demand.
PATCH_LIMIT = 32
# Key marking "a cached subject ends here" in the cached-subject trie; tokens are never empty.
_END = ""


class Subscriber(Protocol):
    """What the sublist needs from a subscription; nothing else is ever looked at."""

    subject: str
    queue: str | None


class InvalidSubjectError(ValueError):
    """Raised by :meth:`Sublist.insert` for a malformed subject."""


class SublistResult:
    """Immutable match result.

    ``psubs`` are the plain subscribers; ``qsubs`` holds one tuple per queue group name, from
    which the caller delivers to one member (picked at random) per group.
    """

    __slots__ = ("psubs", "qsubs")

    psubs: tuple[Any, ...]
    qsubs: tuple[tuple[Any, ...], ...]

    def __init__(self, psubs: tuple[Any, ...], qsubs: tuple[tuple[Any, ...], ...]) -> None:
        object.__setattr__(self, "psubs", psubs)
        object.__setattr__(self, "qsubs", qsubs)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SublistResult is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("SublistResult is immutable")

    def __bool__(self) -> bool:
        return bool(self.psubs or self.qsubs)

    def __repr__(self) -> str:
        return f"SublistResult(psubs={self.psubs!r}, qsubs={self.qsubs!r})"

    def fanout(self) -> int:
        """Deliveries one message makes: each plain subscriber plus one per queue group."""
        return len(self.psubs) + len(self.qsubs)

    def with_sub(self, sub: Subscriber) -> SublistResult:
        """A new result with ``sub`` added (used to patch cached entries on insert)."""
        queue = sub.queue
        if not queue:
            return SublistResult((*self.psubs, sub), self.qsubs)
        groups = list(self.qsubs)
        for i, group in enumerate(groups):
            if group[0].queue == queue:
                groups[i] = (*group, sub)
                break
        else:
            groups.append((sub,))
        return SublistResult(self.psubs, tuple(groups))


EMPTY_RESULT = SublistResult((), ())


class _Node:
    """A trie node: children by token, the wildcard children, and the subs ending here."""

    __slots__ = ("fwc", "nodes", "psubs", "pwc", "qsubs")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None
        self.psubs: dict[int, Any] = {}  # id(sub) -> sub, insertion ordered
        # queue name -> {id(sub): sub}; None until the first queue subscriber (most nodes
        # never have one, and an empty dict per node would cost memory at 100k subs).
        self.qsubs: dict[str, dict[int, Any]] | None = None

    def is_empty(self) -> bool:
        return (
            not self.psubs
            and not self.qsubs
            and not self.nodes
            and self.pwc is None
            and self.fwc is None
        )


def _split_checked(subject: str) -> list[str]:
    """Tokens of a subscription subject, rejecting empty tokens and a non-final ``>``."""
    toks = subject.split(_SEP)
    if _END in toks or (_FWC in toks and toks.index(_FWC) != len(toks) - 1):
        raise InvalidSubjectError(f"invalid subject: {subject!r}")
    return toks


def _add_node(node: _Node, psubs: list[Any], qsubs: dict[str, list[Any]]) -> None:
    if node.psubs:
        psubs.extend(node.psubs.values())
    if node.qsubs:
        for name, members in node.qsubs.items():
            group = qsubs.get(name)
            if group is None:
                qsubs[name] = list(members.values())
            else:
                group.extend(members.values())


def _match_node(
    node: _Node, toks: list[str], i: int, psubs: list[Any], qsubs: dict[str, list[Any]]
) -> None:
    """Collect the subs under ``node`` matching ``toks[i:]`` (recursing only for ``*``)."""
    n = len(toks)
    while i < n:
        fwc = node.fwc
        if fwc is not None:
            _add_node(fwc, psubs, qsubs)
        pwc = node.pwc
        if pwc is not None:
            _match_node(pwc, toks, i + 1, psubs, qsubs)
        nxt = node.nodes.get(toks[i])
        if nxt is None:
            return
        node = nxt
        i += 1
    _add_node(node, psubs, qsubs)


def _collect_keys(level: dict[str, Any], ftoks: list[str], i: int, out: list[str]) -> None:
    """Cached subjects under ``level`` that the filter ``ftoks[i:]`` matches.

    Stops early once more than ``PATCH_LIMIT`` are found: the caller then drops the whole
    cache, so the exact list no longer matters.
    """
    n = len(ftoks)
    while i < n:
        t = ftoks[i]
        if t == _FWC:
            # Every cached subject with at least one more token.
            for tok, child in level.items():
                if tok:
                    _collect_all_keys(child, out)
                    if len(out) > PATCH_LIMIT:
                        return
            return
        if t == _PWC:
            for tok, child in level.items():
                if tok:
                    _collect_keys(child, ftoks, i + 1, out)
                    if len(out) > PATCH_LIMIT:
                        return
            return
        nxt = level.get(t)
        if nxt is None:
            return
        level = nxt
        i += 1
    key = level.get(_END)
    if key is not None:
        out.append(key)


def _collect_all_keys(level: dict[str, Any], out: list[str]) -> None:
    for tok, child in level.items():
        if tok:
            _collect_all_keys(child, out)
            if len(out) > PATCH_LIMIT:
                return
        else:
            out.append(child)


class Sublist:
    """Subscription index with a match cache; see the module docstring for the design."""

    __slots__ = (
        "_cache",
        "_cache_enabled",
        "_cache_max",
        "_cache_sweep",
        "_ckeys",
        "_count",
        "_hits",
        "_inserts",
        "_matches",
        "_removes",
        "_root",
    )

    def __init__(
        self, cache: bool = True, cache_max: int = CACHE_MAX, cache_sweep: int = CACHE_SWEEP
    ) -> None:
        if not 0 <= cache_sweep < cache_max:
            raise ValueError("need 0 <= cache_sweep < cache_max")
        self._root = _Node()
        self._cache_enabled = cache
        self._cache_max = cache_max
        self._cache_sweep = cache_sweep
        self._cache: dict[str, SublistResult] = {}
        # Trie of cached subjects: token -> child level; _END -> the full subject.
        self._ckeys: dict[str, Any] = {}
        self._count = 0
        self._inserts = 0
        self._removes = 0
        self._matches = 0
        self._hits = 0

    @property
    def count(self) -> int:
        """Number of subscriptions currently inserted."""
        return self._count

    # ----------------------------------------------------------------- changes

    def insert(self, sub: Subscriber) -> None:
        """Add ``sub``. Inserting an already-inserted object again changes nothing.

        Raises :class:`InvalidSubjectError` for an empty token or a ``>`` that is not last
        (full validation, whitespace included, is the protocol layer's ``valid_subject``).
        """
        subject = sub.subject
        toks = _split_checked(subject)
        node = self._root
        for t in toks:
            if t == _PWC:
                nxt = node.pwc
                if nxt is None:
                    nxt = node.pwc = _Node()
            elif t == _FWC:
                nxt = node.fwc
                if nxt is None:
                    nxt = node.fwc = _Node()
            else:
                nxt = node.nodes.get(t)
                if nxt is None:
                    nxt = node.nodes[t] = _Node()
            node = nxt
        key = id(sub)
        queue = sub.queue
        if not queue:
            if key in node.psubs:
                return
            node.psubs[key] = sub
        else:
            if node.qsubs is None:
                node.qsubs = {}
            members = node.qsubs.get(queue)
            if members is None:
                members = node.qsubs[queue] = {}
            elif key in members:
                return
            members[key] = sub
        self._count += 1
        self._inserts += 1
        if self._cache:
            self._patch_cache(subject, toks, sub)

    def remove(self, sub: Subscriber) -> bool:
        """Remove ``sub`` (by identity); False if it was not inserted.

        A malformed subject simply is not found: :meth:`insert` never accepted one.
        """
        subject = sub.subject
        toks = subject.split(_SEP)
        node = self._root
        path: list[tuple[_Node, str]] = []
        for t in toks:
            if t == _PWC:
                nxt = node.pwc
            elif t == _FWC:
                nxt = node.fwc
            else:
                nxt = node.nodes.get(t)
            if nxt is None:
                return False
            path.append((node, t))
            node = nxt
        key = id(sub)
        queue = sub.queue
        if not queue:
            if node.psubs.pop(key, None) is None:
                return False
        else:
            qsubs = node.qsubs
            if qsubs is None:
                return False
            members = qsubs.get(queue)
            if members is None or members.pop(key, None) is None:
                return False
            if not members:
                del qsubs[queue]
                if not qsubs:
                    node.qsubs = None
        self._count -= 1
        self._removes += 1
        # Prune nodes left empty, bottom-up, so churn does not grow the trie.
        for parent, t in reversed(path):
            if not node.is_empty():
                break
            if t == _PWC:
                parent.pwc = None
            elif t == _FWC:
                parent.fwc = None
            else:
                del parent.nodes[t]
            node = parent
        if self._cache:
            self._invalidate_cache(subject, toks)
        return True

    # ----------------------------------------------------------------- lookups

    def match(self, subject: str, cache: bool = True) -> SublistResult:
        """Subscribers interested in the literal ``subject``.

        A subject with an empty token matches nothing and is not cached (as in nats-server).
        Wildcard characters in ``subject`` are ordinary token text. ``cache=False`` still reads
        the cache but doesn't add to it: for subjects used once (reply inboxes, ack subjects),
        which would only evict useful entries and pay for the insert and the sweeps.
        """
        self._matches += 1
        result = self._cache.get(subject)
        if result is not None:
            self._hits += 1
            return result
        toks = subject.split(_SEP)
        if _END in toks:
            return EMPTY_RESULT
        psubs: list[Any] = []
        qsubs: dict[str, list[Any]] = {}
        _match_node(self._root, toks, 0, psubs, qsubs)
        if psubs or qsubs:
            result = SublistResult(tuple(psubs), tuple([tuple(g) for g in qsubs.values()]))
        else:
            result = EMPTY_RESULT
        if self._cache_enabled and cache:
            self._cache[subject] = result
            self._add_ckey(subject, toks)
            if len(self._cache) > self._cache_max:
                self._sweep()
        return result

    def only_wildcards_after(self, prefix: str) -> bool:
        """Whether every subscription reaching past the literal ``prefix`` has only wildcard
        tokens there, so that a match of ``prefix.<anything>`` depends only on the number of
        tokens after it (the server's reply-subject memo relies on this)."""
        reached: list[_Node] = []
        _reach(self._root, prefix.split(_SEP), 0, reached)
        return all(_wild_only(node) for node in reached)

    def all(self) -> list[Any]:
        """Every inserted subscription (for monitoring; walks the whole trie)."""
        out: list[Any] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            out.extend(node.psubs.values())
            if node.qsubs:
                for members in node.qsubs.values():
                    out.extend(members.values())
            stack.extend(node.nodes.values())
            if node.pwc is not None:
                stack.append(node.pwc)
            if node.fwc is not None:
                stack.append(node.fwc)
        return out

    def stats(self) -> dict[str, int | float]:
        """Counters under nats-server's /subsz field names (SublistStats in sublist.go).

        Fanout counts a queue group once, and is computed over the cached results only.
        """
        matches = self._matches
        total = 0
        largest = 0
        for result in self._cache.values():
            fanout = len(result.psubs) + len(result.qsubs)
            total += fanout
            if fanout > largest:
                largest = fanout
        ncache = len(self._cache)
        return {
            "num_subscriptions": self._count,
            "num_cache": ncache,
            "num_inserts": self._inserts,
            "num_removes": self._removes,
            "num_matches": matches,
            "cache_hit_rate": self._hits / matches if matches else 0.0,
            "max_fanout": largest,
            "avg_fanout": total / ncache if total else 0.0,
        }

    # ----------------------------------------------------------------- cache upkeep

    def _patch_cache(self, subject: str, toks: list[str], sub: Subscriber) -> None:
        """Add a newly inserted ``sub`` to every cached result it matches."""
        cache = self._cache
        if is_literal(subject):
            result = cache.get(subject)
            if result is not None:
                cache[subject] = result.with_sub(sub)
            return
        keys: list[str] = []
        _collect_keys(self._ckeys, toks, 0, keys)
        if len(keys) > PATCH_LIMIT:
            self._clear_cache()
            return
        for key in keys:
            cache[key] = cache[key].with_sub(sub)

    def _invalidate_cache(self, subject: str, toks: list[str]) -> None:
        """Drop every cached result a removed subscription on ``subject`` was part of."""
        if is_literal(subject):
            if self._cache.pop(subject, None) is not None:
                self._del_ckey(toks)
            return
        keys: list[str] = []
        _collect_keys(self._ckeys, toks, 0, keys)
        if len(keys) > PATCH_LIMIT:
            self._clear_cache()
            return
        cache = self._cache
        for key in keys:
            del cache[key]
            self._del_ckey(key.split(_SEP))

    def _clear_cache(self) -> None:
        self._cache = {}
        self._ckeys = {}

    def _add_ckey(self, subject: str, toks: list[str]) -> None:
        level = self._ckeys
        for t in toks:
            nxt = level.get(t)
            if nxt is None:
                nxt = level[t] = {}
            level = nxt
        level[_END] = subject

    def _del_ckey(self, toks: list[str]) -> None:
        level = self._ckeys
        path: list[tuple[dict[str, Any], str]] = []
        for t in toks:
            path.append((level, t))
            level = level[t]
        del level[_END]
        for parent, t in reversed(path):
            if parent[t]:
                break
            del parent[t]

    def _sweep(self) -> None:
        """Shrink the cache to ``cache_sweep`` entries, keeping the most recently added.

        Rebuilding the small survivor set's key trie is cheaper than deleting the evicted
        majority from it one path at a time.
        """
        keep = self._cache_sweep
        survivors = list(self._cache.items())[-keep:] if keep else []
        self._cache = dict(survivors)
        self._ckeys = {}
        for key in self._cache:
            self._add_ckey(key, key.split(_SEP))


def _reach(node: _Node, toks: list[str], i: int, out: list[_Node]) -> None:
    """The trie nodes a subject starting with ``toks`` passes through at its last token."""
    if i == len(toks):
        out.append(node)
        return
    if node.pwc is not None:
        _reach(node.pwc, toks, i + 1, out)
    nxt = node.nodes.get(toks[i])
    if nxt is not None:
        _reach(nxt, toks, i + 1, out)


def _wild_only(node: _Node) -> bool:
    if node.nodes:
        return False
    return (node.pwc is None or _wild_only(node.pwc)) and (node.fwc is None or _wild_only(node.fwc))
