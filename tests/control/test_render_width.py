"""Plan and apply tables in an 80-column CI log: identifiers are never cut.

Without a terminal rich falls back to 80 columns; a table that cut ``Consumer/ORDERS/D…`` there
hid which resource a plan changes. Names, subjects and metadata keys must appear whole, in a
table when they fit side by side and as a list when they do not.
"""

from __future__ import annotations

from rich.console import Console

from headwater.control import render
from headwater.control.apply import ApplyReport, Result, Status
from headwater.control.models import Stream
from headwater.control.plan import Plan, make_plan

from .test_plan_offline import OWNER, consumer_doc, docs, live_with, stream_doc

STREAM = "ORDERS-FROM-THE-EUROPEAN-WAREHOUSES"
CONSUMER = "DISPATCH-TO-THE-NORTHERN-COURIERS"
SUBJECT = "orders.europe.warehouse.incoming.priority.>"
FILTER = "orders.europe.warehouse.incoming.priority.express"
META_KEY = "team.example.com/owner-of-this-stream"
IDENTIFIERS = (f"Stream/{STREAM}", f"Consumer/{STREAM}/{CONSUMER}", SUBJECT, META_KEY)


def long_plan() -> Plan:
    live = live_with(Stream(name=STREAM, subjects=["orders.old"]))
    text = stream_doc(STREAM, f", subjects: ['{SUBJECT}'], metadata: {{{META_KEY}: x}}")
    text += consumer_doc(STREAM, CONSUMER, f", filterSubject: {FILTER}")
    return make_plan(docs(text), live, owner=OWNER)


def printed(width: int, print_it: object, *, soft_wrap: bool = False) -> str:
    console = Console(width=width, record=True, soft_wrap=soft_wrap)
    print_it(console)  # type: ignore[operator]
    return console.export_text()


def test_plan_at_80_columns_keeps_every_identifier_whole() -> None:
    plan = long_plan()
    # gitops prints the plan on a plain Console(), which crops at its width: still whole.
    for soft_wrap in (False, True):
        text = printed(80, lambda c: render.print_plan(plan, c), soft_wrap=soft_wrap)
        for identifier in IDENTIFIERS:
            assert identifier in text, f"{identifier!r} cut in:\n{text}"
        assert "…" not in text
        assert "Plan: 1 to create, 1 to update" in text


def test_plan_is_a_table_when_it_fits_and_a_list_when_it_does_not() -> None:
    plan = long_plan()
    wide = printed(250, lambda c: render.print_plan(plan, c))
    assert "┃ Resource" in wide  # the table header
    for identifier in IDENTIFIERS:
        assert identifier in wide
    narrow = printed(80, lambda c: render.print_plan(plan, c))
    assert "┃" not in narrow
    assert f"+ create Consumer/{STREAM}/{CONSUMER}" in narrow


def test_a_short_plan_stays_a_table_at_80_columns() -> None:
    live = live_with(Stream(name="S", max_age="1y"))
    plan = make_plan(docs(stream_doc("S", ", maxAge: 90d")), live, owner=OWNER)
    text = printed(80, lambda c: render.print_plan(plan, c))
    assert "┃ Resource" in text and "Stream/S" in text and "max_age: 1y -> 90d" in text


def test_apply_report_at_80_columns_keeps_every_identifier_whole() -> None:
    plan = long_plan()
    message = f"created with filter {FILTER}"
    report = ApplyReport(
        [Result(change, Status.APPLIED, message) for change in plan.ordered()]
        + [Result(plan.ordered()[0], Status.FAILED, f"subject {SUBJECT} overlaps")]
    )
    text = printed(80, lambda c: c.print(render.report_table(report)))
    for identifier in (f"Stream/{STREAM}", f"Consumer/{STREAM}/{CONSUMER}", FILTER, SUBJECT):
        assert identifier in text, f"{identifier!r} cut in:\n{text}"
    assert "…" not in text
