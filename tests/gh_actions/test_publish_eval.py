"""The publish and eval actions against a real server: payloads, headers, the JetStream ack,
and assertions over stream and consumer info that pass, fail or are refused."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import nats
import pytest
from gh_actions.locations import ACTIONS, RunAction
from nats.js.api import ConsumerConfig, StreamConfig

from headwater.testing import ServerProcess


@pytest.fixture
async def orders(headwater_js: ServerProcess) -> AsyncIterator[ServerProcess]:
    """A headwater-server holding an ORDERS stream with a durable pull consumer NEW."""
    nc = await nats.connect(headwater_js.url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"], max_age=3600))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="NEW", max_deliver=20))
        yield headwater_js
    finally:
        await nc.close()


async def stored(url: str, seq: int) -> tuple[bytes, dict[str, str]]:
    nc = await nats.connect(url)
    try:
        msg = await nc.jetstream().get_msg("ORDERS", seq)
        return msg.data or b"", dict(msg.headers or {})
    finally:
        await nc.close()


async def test_publish_with_headers_waits_for_the_ack(
    orders: ServerProcess, act: RunAction
) -> None:
    run = act(
        "publish",
        server=orders.url,
        subject="ORDERS.received",
        payload='{"id": 1}',
        headers="Order-Id: 1\n\n  Source: ci  \n",
        jetstream="true",
    )
    assert run.ok, run.log
    ack = json.loads(run.outputs["response"])
    assert ack["stream"] == "ORDERS" and ack["seq"] == 1
    data, headers = await stored(orders.url, 1)
    assert data == b'{"id": 1}'
    assert headers["Order-Id"] == "1" and headers["Source"] == "ci"


async def test_publish_a_file_and_a_payload_starting_with_a_dash(
    orders: ServerProcess, act: RunAction, workspace: Path
) -> None:
    (workspace / "order.bin").write_bytes(b"line one\nline two\n")
    first = act("publish", server=orders.url, subject="ORDERS.a", payload_file="order.bin")
    assert first.ok, first.log
    assert first.outputs["response"] == ""
    second = act("publish", server=orders.url, subject="ORDERS.b", payload="--yes -f")
    assert second.ok, second.log
    assert (await stored(orders.url, 1))[0] == b"line one\nline two\n"
    assert (await stored(orders.url, 2))[0] == b"--yes -f"


def test_publish_with_jetstream_fails_when_no_stream_stores_the_subject(
    headwater_js: ServerProcess, act: RunAction
) -> None:
    run = act("publish", server=headwater_js.url, subject="nowhere", jetstream="true")
    assert not run.ok
    assert "no stream stores subject nowhere" in run.log


async def test_eval_stream_assertions_pass(orders: ServerProcess, act: RunAction) -> None:
    for n in range(3):
        assert act("publish", server=orders.url, subject="ORDERS.received", payload=str(n)).ok
    run = act(
        "eval",
        server=orders.url,
        stream="ORDERS",
        expression="""
            # one assertion per line
            state.messages == 3
            config.subjects == ["ORDERS.*"]
            config.max_age == duration("1h")
            config["storage"] == "file" and state.last_seq >= 3
            get(config, "description", "") == ""
            len([s for s in config.subjects if s.startswith("ORDERS")]) == 1
        """,
    )
    assert run.ok, run.log
    assert run.outputs["passed"] == "true"
    results = json.loads(run.outputs["results"])
    assert len(results) == 6 and all(r["passed"] for r in results)
    assert json.loads(run.outputs["info"])["config"]["name"] == "ORDERS"
    assert "6 of 6 assertion(s) held." in run.summary


async def test_eval_fails_the_step_and_shows_the_values(
    orders: ServerProcess, act: RunAction
) -> None:
    run = act(
        "eval",
        server=orders.url,
        stream="ORDERS",
        expression="state.messages == 0\nstate.messages > 5\nconfig.colour == 'blue'",
    )
    assert not run.ok
    assert run.outputs["passed"] == "false"
    results = json.loads(run.outputs["results"])
    assert [r["passed"] for r in results] == [True, False, False]
    assert results[1]["detail"] == "state.messages = 0"
    assert "no field 'colour'" in results[2]["detail"]
    assert "max_age" in results[2]["detail"]  # the fields there are
    failed = [a.message for a in run.annotations if a.level == "error"]
    assert failed[0] == "state.messages > 5: state.messages = 0"
    assert "❌" in run.summary


async def test_eval_consumer_info(orders: ServerProcess, act: RunAction) -> None:
    run = act(
        "eval",
        server=orders.url,
        stream="ORDERS",
        consumer="NEW",
        expression="config.durable_name == 'NEW'\nconfig.max_deliver == 20\nnum_pending == 0",
    )
    assert run.ok, run.log
    assert json.loads(run.outputs["info"])["name"] == "NEW"


def load_evaluate() -> ModuleType:
    """gh-actions/eval/evaluate.py as a module, to check the expression rules directly."""
    name = "gh_actions_eval_evaluate"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ACTIONS / "eval" / "evaluate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "config.__class__",
        "config._private",
        "open('/etc/passwd')",
        "(lambda: 1)()",
        "config.name.format()",
        "[x := 1]",
        "state.messages ==",
    ],
)
def test_eval_refuses_anything_but_reading_data(expression: str) -> None:
    evaluate = load_evaluate()
    names = evaluate.namespace({"config": {"name": "ORDERS"}, "state": {"messages": 1}})
    outcome = evaluate.evaluate(expression, names)
    assert not outcome.passed
    assert outcome.detail.startswith(("error:", "syntax error:")), outcome.detail


def test_eval_step_fails_on_a_refused_expression(
    headwater_js: ServerProcess, act: RunAction
) -> None:
    run = act("eval", server=headwater_js.url, stream="NOPE", expression="open('x')")
    assert not run.ok
    run = act("eval", server=headwater_js.url, stream="NOPE", expression="  \n# nothing\n")
    assert not run.ok


def test_eval_of_a_missing_stream_fails(headwater_js: ServerProcess, act: RunAction) -> None:
    run = act("eval", server=headwater_js.url, stream="NOPE", expression="state.messages == 0")
    assert not run.ok
    assert "stream not found" in run.log
