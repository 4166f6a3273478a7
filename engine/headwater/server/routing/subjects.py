"""Pure functions on NATS subjects.

A subject is a string of tokens separated by ``.``. In a subscription (a *filter*) the token
``*`` matches exactly one token and the token ``>`` matches one or more trailing tokens and may
only be the last token. A wildcard character that is not a whole token (``foo*``, ``a>b``) is an
ordinary literal character, as in nats-server.

These functions sit on the publish path, so they lean on C-implemented ``str`` methods
(``split``, ``in``, ``startswith``) instead of per-character Python loops or regexes. Only the
wildcard cases ever split a subject into tokens, and then they loop per token, never per
character.

Validity rules, taken from nats-server's ``IsValidSubject`` (sublist.go):

- the subject is non-empty and no token is empty (no leading, trailing or doubled dot);
- no token contains a space, tab, CR, LF or form feed;
- ``>`` as a whole token only appears last.

nats-server checks for NUL bytes and broken UTF-8 only on some internal paths, never for a
client's SUB or PUB; Python ``str`` subjects are already decoded, so neither is checked here.
"""

from __future__ import annotations

SERVERS_ONLY = "$HW."
"""Subjects the servers of a cluster speak to each other on (``$HW.JSC`` requests sent on,
``$HW.JSR`` gathered answers). A client may not publish there, nor ask for replies there:
it could act in a server's name (docs/DIFFERENCES.md)."""

__all__ = [
    "SERVERS_ONLY",
    "is_literal",
    "subject_is_subset",
    "subject_matches",
    "subjects_overlap",
    "tokens",
    "valid_literal_subject",
    "valid_subject",
]

_PWC = "*"
_FWC = ">"
_SEP = "."


def tokens(subject: str) -> list[str]:
    """Split ``subject`` into its tokens (no validation: ``"a..b"`` gives an empty token)."""
    return subject.split(_SEP)


def is_literal(subject: str) -> bool:
    """True if ``subject`` has no wildcard token (``*`` or ``>`` standing alone as a token).

    Like nats-server's ``subjectIsLiteral`` this does not check validity: ``foo*`` and ``a>b``
    are literal because their wildcard characters are not whole tokens.
    """
    if _PWC not in subject and _FWC not in subject:
        return True
    toks = subject.split(_SEP)
    return _PWC not in toks and _FWC not in toks


def valid_subject(subject: str) -> bool:
    """True if ``subject`` is acceptable in a SUB (wildcards allowed), per ``IsValidSubject``."""
    if not subject:
        return False
    # Empty tokens: a leading or trailing dot, or two dots in a row.
    if subject[0] == _SEP or subject[-1] == _SEP or ".." in subject:
        return False
    if " " in subject or "\t" in subject or "\r" in subject or "\n" in subject or "\f" in subject:
        return False
    # A `>` token followed by anything: it is either the first token or preceded by a dot,
    # and is followed by a dot.
    return not (subject.startswith(">.") or ".>." in subject)


def valid_literal_subject(subject: str) -> bool:
    """True if ``subject`` is valid and has no wildcard token: a subject one can publish to.

    This is nats-server's ``IsValidPublishSubject`` (valid and literal). Note how nats-server
    applies it to a client's PUB/HPUB: only when the client asked for ``pedantic`` in CONNECT,
    and even then it only sends ``-ERR 'Invalid Publish Subject'`` and still delivers the
    message. Without pedantic, a publish to ``foo.*`` is routed with ``*`` taken as an ordinary
    token, which only wildcard subscriptions (``foo.*``, ``foo.>``, ``>``) can match.
    """
    return valid_subject(subject) and is_literal(subject)


def subject_matches(filter: str, subject: str) -> bool:
    """True if the literal ``subject`` is matched by ``filter`` (which may have wildcards).

    ``filter`` is assumed valid. A ``subject`` with an empty token never matches a wildcard
    filter (nats-server delivers nothing for such a publish). Wildcard characters in
    ``subject`` are ordinary token text: ``*`` in a filter matches the published token ``*``
    but a literal filter never does.
    """
    if filter == subject:
        return True
    if _PWC not in filter and _FWC not in filter:
        return False
    if not subject or subject[0] == _SEP or subject[-1] == _SEP or ".." in subject:
        return False
    ftoks = filter.split(_SEP)
    stoks = subject.split(_SEP)
    nf = len(ftoks)
    if ftoks[-1] == _FWC:
        nf -= 1
        # `>` needs at least one token of its own.
        if len(stoks) <= nf:
            return False
    elif len(stoks) != nf:
        return False
    for i in range(nf):
        f = ftoks[i]
        if f != stoks[i] and f != _PWC:
            return False
    return True


def subjects_overlap(a: str, b: str) -> bool:
    """True if some literal subject is matched by both filters ``a`` and ``b``.

    Used for stream subject overlap checks (JetStream error 10065). Both filters are assumed
    valid. Unlike nats-server's ``SubjectsCollide``, which looks at a token's first character,
    only whole ``*``/``>`` tokens count as wildcards here, consistent with matching.
    """
    if a == b:
        return True
    if is_literal(a) and is_literal(b):
        return False
    atoks = a.split(_SEP)
    btoks = b.split(_SEP)
    for ta, tb in zip(atoks, btoks, strict=False):
        if ta == _FWC or tb == _FWC:
            # Both still have a token at this position, so `>` can absorb the other's tail.
            return True
        if ta != tb and ta != _PWC and tb != _PWC:
            return False
    # No `>` reached: every matched subject has exactly len(tokens) tokens on both sides.
    return len(atoks) == len(btoks)


def subject_is_subset(sub: str, filter: str) -> bool:
    """True if every subject matched by ``sub`` is also matched by ``filter``.

    Used for consumer filter checks (is the consumer's filter inside the stream's subjects).
    Both are assumed valid filters. ``foo.*`` is a subset of ``foo.*``, ``*.*``, ``foo.>`` and
    ``>``, but not of ``foo.bar``; ``foo.>`` is not a subset of ``foo.*``.
    """
    if sub == filter:
        return True
    if is_literal(filter):
        # A literal filter matches one subject; only that same literal is inside it.
        return False
    stoks = sub.split(_SEP)
    ftoks = filter.split(_SEP)
    ns = len(stoks)
    for i, f in enumerate(ftoks):
        if f == _FWC:
            # `>` covers any non-empty tail, which `sub` has if it still has a token here
            # (including a `>` of its own).
            return i < ns
        if i >= ns:
            return False
        s = stoks[i]
        if s == _FWC:
            # `sub` matches tails of any length; the filter's remaining tokens cannot.
            return False
        if f != s and f != _PWC:
            # Either different literals, or `sub` has `*` where the filter has a literal.
            return False
    return len(ftoks) == ns
