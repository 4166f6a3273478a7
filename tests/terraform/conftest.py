"""Run the real ``terraform`` binary against the provider and a real server.

One provider process in ``--dev`` mode serves the whole session: Terraform attaches to it
through ``TF_REATTACH_PROVIDERS`` (no ``init``), so a plan or apply costs a fraction of a
second. Every command runs with ``CHECKPOINT_DISABLE=1`` and an explicit, empty
``TF_CLI_CONFIG_FILE`` so nothing reaches the network. Servers are JetStream-enabled,
one of each kind per module, emptied before each test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.client import Client

from headwater.control import api
from headwater.testing import ServerProcess
from support.controlplane import empty_jetstream, run_on

T = TypeVar("T")

TERRAFORM_TIMEOUT = 60


def terraform_binary() -> str:
    binary = shutil.which("terraform")
    if binary is None:
        pytest.fail("terraform is not on PATH")
    return binary


@pytest.fixture(scope="session")
def reattach(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``TF_REATTACH_PROVIDERS`` of one provider process serving every test."""
    log = tmp_path_factory.mktemp("provider") / "stderr.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater_terraform.main", "--dev"],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("TF_REATTACH_PROVIDERS="):
            pytest.fail(f"provider did not start: {line!r}\n{log.read_text()}")
        yield line.removeprefix("TF_REATTACH_PROVIDERS=").strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def headwater_server() -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


def server_api(server: ServerProcess, subject: str, body: dict[str, Any] | None = None) -> Any:
    """One JetStream API request (raises api.ApiError on an error reply)."""

    async def call(nc: Client) -> Any:
        return await api.request(nc, subject, body)

    return run_on(server, call)


def stream_info(server: ServerProcess, name: str) -> dict[str, Any] | None:
    try:
        return server_api(server, f"STREAM.INFO.{name}")
    except api.ApiError as error:
        if error.err_code == api.STREAM_NOT_FOUND:
            return None
        raise


def consumer_info(server: ServerProcess, stream: str, name: str) -> dict[str, Any] | None:
    try:
        return server_api(server, f"CONSUMER.INFO.{stream}.{name}")
    except api.ApiError as error:
        if error.err_code in (api.CONSUMER_NOT_FOUND, api.STREAM_NOT_FOUND):
            return None
        raise


@dataclass
class Outcome:
    returncode: int
    output: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\n{self.output}"

    def says(self, text: str) -> bool:
        """``text`` is in the output, whatever Terraform's line wrapping did to it."""
        return " ".join(text.split()) in " ".join(self.output.split())


class Terraform:
    """A working directory and the environment every command runs with."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env

    def write(self, body: str, provider: str = "") -> None:
        """``main.tf``: the ``required_providers`` block, ``provider`` config, then ``body``."""
        header = (
            "terraform {\n  required_providers {\n"
            '    headwater = { source = "headwater.io/headwater/headwater" }\n  }\n}\n'
        )
        (self.workdir / "main.tf").write_text(header + provider + "\n" + body)

    def run(self, *args: str, check: bool = False) -> Outcome:
        proc = subprocess.run(
            [terraform_binary(), *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TERRAFORM_TIMEOUT,
            check=False,
        )
        outcome = Outcome(proc.returncode, proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            pytest.fail(f"terraform {' '.join(args)} failed: {outcome}")
        return outcome

    def apply(self, *args: str, check: bool = True) -> Outcome:
        return self.run("apply", "-auto-approve", "-no-color", "-input=false", *args, check=check)

    def plan(self, *args: str) -> Outcome:
        """``plan -detailed-exitcode``: 0 no changes, 2 changes, 1 error."""
        return self.run("plan", "-detailed-exitcode", "-no-color", "-input=false", *args)

    def destroy(self) -> Outcome:
        return self.run("destroy", "-auto-approve", "-no-color", "-input=false", check=True)

    def state(self) -> dict[str, Any]:
        path = self.workdir / "terraform.tfstate"
        return json.loads(path.read_text()) if path.exists() else {}

    def attributes(self, address: str) -> dict[str, Any]:
        """The state attributes of one resource (``headwater_stream.orders``)."""
        kind, name = address.split(".", 1)
        for resource in self.state().get("resources", []):
            if resource["type"] == kind and resource["name"] == name:
                return resource["instances"][0]["attributes"]
        raise KeyError(address)


def base_env(workdir: Path) -> dict[str, str]:
    config = workdir / "terraform.rc"
    config.write_text("# empty: no provider installation from the network\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "NATS_"))}
    env |= {
        "CHECKPOINT_DISABLE": "1",
        "TF_CLI_CONFIG_FILE": str(config),
        "TF_IN_AUTOMATION": "1",
        # The mirror's launcher runs the provider with this interpreter (install.LAUNCHER).
        "HEADWATER_PYTHON": sys.executable,
    }
    return env


def provider_block(server: ServerProcess) -> str:
    return f'provider "headwater" {{\n  servers = "{server.url}"\n}}\n'


@pytest.fixture
def clean(js_server: ServerProcess) -> ServerProcess:
    """``js_server`` with no streams and no templates."""
    run_on(js_server, empty_jetstream)
    return js_server


@pytest.fixture
def clean_headwater(headwater_server: ServerProcess) -> ServerProcess:
    run_on(headwater_server, empty_jetstream)
    return headwater_server


@pytest.fixture
def tf(tmp_path: Path, reattach: str) -> Terraform:
    """Terraform in a fresh directory, attached to the session's provider."""
    env = base_env(tmp_path)
    env["TF_REATTACH_PROVIDERS"] = reattach
    return Terraform(tmp_path, env)
