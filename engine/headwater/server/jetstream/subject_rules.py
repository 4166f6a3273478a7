"""Subject checks that stream configuration validation needs, with the reference's semantics.

These are the rules nats-server applies to config fields (``IsValidSubject``,
``SubjectsCollide``, ``subjectIsSubsetMatch``, ``ValidateMapping``), including its error texts for
subject-transform destinations, which reach clients inside errors 10052/10155/10156. They work on
whole strings: configs are validated once per API call, so clarity beats speed here. Message
routing has its own, faster matcher.
"""

from __future__ import annotations

import re

__all__ = [
    "BAD_SUBJECT",
    "is_subset_match",
    "is_valid_publish_subject",
    "is_valid_subject",
    "subject_is_literal",
    "subjects_collide",
    "transform_error",
    "validate_mapping",
]

_WHITESPACE = frozenset(" \t\n\r\f")
BAD_SUBJECT = "invalid subject"
_BAD_DEST = "invalid mapping destination"


def is_valid_subject(subject: str) -> bool:
    """Non-empty tokens, no whitespace, and ``>`` only as the last token."""
    if not subject:
        return False
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token or any(c in _WHITESPACE for c in token):
            return False
        if token == ">" and index != len(tokens) - 1:
            return False
    return True


def subject_is_literal(subject: str) -> bool:
    """True when no token is a bare ``*`` or ``>`` (validity is not checked)."""
    return all(token not in ("*", ">") for token in subject.split("."))


def is_valid_publish_subject(subject: str) -> bool:
    return is_valid_subject(subject) and subject_is_literal(subject)


def is_subset_match(subject: str, test: str) -> bool:
    """True when every subject ``subject`` matches is also matched by ``test``.

    ``foo.*`` is a subset of ``>``, ``*.*`` and ``foo.*``, but not of ``foo.bar``.
    """
    tokens, tests = subject.split("."), test.split(".")
    for index, t2 in enumerate(tests):
        if index >= len(tokens) or not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[index]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if t2 != "*":
                return False
            continue
        # Like the reference, a test token merely starting with "*" is not compared.
        if t2[0] != "*" and t1 != t2:
            return False
    return len(tokens) == len(tests)


def _wildcards(tokens: list[str]) -> tuple[bool, bool]:
    return "*" in tokens, ">" in tokens


def subjects_collide(subj1: str, subj2: str) -> bool:
    """True when some literal subject could match both (wildcards allowed on either side)."""
    if subj1 == subj2:
        return True
    toks1, toks2 = subj1.split("."), subj2.split(".")
    pwc1, fwc1 = _wildcards(toks1)
    pwc2, fwc2 = _wildcards(toks2)
    literal1, literal2 = not (pwc1 or fwc1), not (pwc2 or fwc2)
    if literal1 and literal2:
        return False
    if literal1:
        return is_subset_match(subj1, subj2)
    if literal2:
        return is_subset_match(subj2, subj1)
    # The shorter side can only reach the longer one through a trailing ">".
    if (len(toks1) < len(toks2) and not fwc1) or (len(toks2) < len(toks1) and not fwc2):
        return False
    for t1, t2 in zip(toks1, toks2, strict=False):
        if not t1 or not t2:
            return False
        if t1[0] in "*>" or t2[0] in "*>":
            continue
        if t1 != t2:
            return False
    return True


# --- subject transforms ----------------------------------------------------------------------

_FUNCTIONS = {
    name: re.compile(r"{{\s*" + pattern + r"\s*\((.*)\)\s*}}")
    for name, pattern in (
        ("wildcard", "[wW]ildcard"),
        ("partition", "[pP]artition"),
        ("splitfromleft", "[sS]plit[fF]rom[lL]eft"),
        ("splitfromright", "[sS]plit[fF]rom[rR]ight"),
        ("slicefromleft", "[sS]lice[fF]rom[lL]eft"),
        ("slicefromright", "[sS]lice[fF]rom[rR]ight"),
        ("split", "[sS]plit"),
    )
}
_ARG_SEPARATOR = re.compile(r",\s*")


class _MappingError(Exception):
    def __init__(self, reason: str, token: str | None = None) -> None:
        text = f"{_BAD_DEST}: {reason}"
        super().__init__(f"{text} in {token}" if token is not None else text)


def _atoi(text: str, token: str) -> int:
    text = text.strip(" ")
    if not re.fullmatch(r"[+-]?\d+", text):
        raise _MappingError("function argument is invalid or in the wrong format", token)
    return int(text)


def _placeholder_indexes(token: str) -> list[int] | None:
    """Source-wildcard indexes a destination token refers to; None for a plain token."""
    if len(token) > 1 and token[0] == "$":
        return [int(token[1:])] if re.fullmatch(r"[+-]?\d+", token[1:]) else None
    if not (len(token) > 4 and token.startswith("{{") and token.endswith("}}")):
        return None
    for name, regex in _FUNCTIONS.items():
        found = regex.search(token)
        if found is None:
            continue
        args = _ARG_SEPARATOR.split(found.group(1))
        if name == "wildcard":
            if args == [""]:
                raise _MappingError("not enough arguments passed to the function", token)
            if len(args) > 1:
                raise _MappingError("too many arguments passed to the function", token)
            return [_atoi(args[0], token)]
        if name == "partition":
            if len(args) < 2:
                raise _MappingError("not enough arguments passed to the function", token)
            _atoi(args[0], token)
            return [_atoi(arg, token) for arg in args[1:]]
        if len(args) < 2:
            raise _MappingError("not enough arguments passed to the function", token)
        if len(args) > 2:
            raise _MappingError("too many arguments passed to the function", token)
        index = _atoi(args[0], token)
        if name == "split":
            if " " in args[1] or "." in args[1]:
                raise _MappingError("function argument is invalid or in the wrong format", token)
        else:
            _atoi(args[1], token)
        return [index]
    raise _MappingError("unknown function", token)


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    tokens = subject.split(".")
    seen_fwc = False
    pwcs = 0
    for token in tokens:
        if not token or seen_fwc:
            return False, tokens, 0, False
        if token == ">":
            seen_fwc = True
        elif token == "*":
            pwcs += 1
    return bool(subject), tokens, pwcs, seen_fwc


def transform_error(src: str, dest: str) -> str | None:
    """Why ``src -> dest`` is not a valid subject transform (``NewSubjectTransform``), or None."""
    src = src or ">"
    src_ok, _, src_pwcs, src_fwc = _subject_info(src)
    dest_ok, dest_tokens, dest_pwcs, dest_fwc = _subject_info(dest)
    if not src_ok or not dest_ok or dest_pwcs > 0 or src_fwc != dest_fwc:
        return BAD_SUBJECT
    try:
        for token in dest_tokens:
            indexes = _placeholder_indexes(token)
            if indexes is None:
                continue
            if src_pwcs == 0:
                raise _MappingError("wildcard index out of range", token)
            for index in indexes:
                if index > src_pwcs:
                    raise _MappingError("wildcard index out of range", f"{token}: [{index}]")
    except _MappingError as exc:
        return str(exc)
    return None


def validate_mapping(src: str, dest: str) -> str | None:
    """Why ``dest`` is not a valid mapping destination for ``src`` (``ValidateMapping``)."""
    if not dest:
        return None
    seen_fwc = False
    for token in dest.split("."):
        if not token or seen_fwc:
            return f"{_BAD_DEST}: invalid subject in {token}"
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(regex.search(token) for regex in _FUNCTIONS.values()):
                return f"{_BAD_DEST}: unknown function in {token}"
            continue
        if token == ">":
            seen_fwc = True
        elif any(c in _WHITESPACE for c in token):
            return f"{_BAD_DEST}: invalid subject"
    return transform_error(src, dest)
