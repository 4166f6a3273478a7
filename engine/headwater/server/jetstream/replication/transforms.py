"""The subject transforms of one mirror or source: the first one that matches rewrites."""

from __future__ import annotations

from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.jetstream.transform import SubjectTransform

__all__ = ["SourceTransforms"]


class SourceTransforms:
    """Transforms in config order; a message no transform matches keeps its subject.

    An empty ``src`` means every subject and an empty ``dest`` means "unchanged": such a
    transform is only a filter (its ``src`` went into the consumer's filters).
    """

    def __init__(self, source: StreamSource) -> None:
        self._rules = [
            SubjectTransform(t.src or ">", t.dest) for t in source.subject_transforms if t.dest
        ]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def apply(self, subject: str) -> str:
        for rule in self._rules:
            out = rule.match(subject)
            if out is not None:
                return out
        return subject
