"""Subject routing: subject rules (``subjects``) and the subscription index (``sublist``)."""

from headwater.server.routing.subjects import subject_matches, valid_literal_subject, valid_subject
from headwater.server.routing.sublist import Sublist, SublistResult, Subscriber

__all__ = [
    "Sublist",
    "SublistResult",
    "Subscriber",
    "subject_matches",
    "valid_literal_subject",
    "valid_subject",
]
