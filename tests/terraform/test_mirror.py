"""Offline installation: the provider goes into a filesystem mirror, and a plain
``required_providers`` block plus ``terraform init`` find it there. Terraform starts the
provider itself here (no reattach), so these take a few seconds each."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.testing import ServerProcess
from headwater_terraform import PROVIDER_VERSION
from headwater_terraform.install import cli_config, install_provider
from tests.terraform.conftest import Terraform, base_env, stream_info

CONFIG = """
terraform {
  required_providers {
    headwater = {
      source  = "headwater.io/headwater/headwater"
      version = "0.1.0"
    }
  }
}

provider "headwater" {}

resource "headwater_stream" "orders" {
  name     = "ORDERS"
  subjects = ["ORDERS.*"]
  max_age  = "1y"
}
"""


@pytest.mark.slow
def test_init_through_the_mirror(tmp_path: Path, clean_headwater: ServerProcess) -> None:
    mirror = tmp_path / "mirror"
    cli_config = tmp_path / "cli.tfrc"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",  # `headwater terraform install`, as docs/TERRAFORM.md says
            "terraform",
            "install",
            "--mirror",
            str(mirror),
            "--cli-config",
            str(cli_config),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "installed headwater.io/headwater/headwater 0.1.0" in installed.stdout
    work = tmp_path / "work"
    work.mkdir()
    env = base_env(work)
    env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    # The provider block is empty: the connection comes from NATS_URL.
    env["NATS_URL"] = clean_headwater.url
    tf = Terraform(work, env)
    (work / "main.tf").write_text(CONFIG)
    init = tf.run("init", "-no-color", "-input=false", check=True)
    assert "Installing headwater.io/headwater/headwater v0.1.0" in init.output
    assert (work / ".terraform.lock.hcl").exists()
    tf.apply()
    assert stream_info(clean_headwater, "ORDERS") is not None
    assert tf.plan().returncode == 0
    # Installing again (an upgrade of the Python package) keeps the lock file valid.
    install_provider(mirror)
    assert tf.run("init", "-no-color", "-input=false").returncode == 0
    tf.destroy()
    assert stream_info(clean_headwater, "ORDERS") is None


@pytest.mark.slow
def test_dev_overrides_need_no_init(tmp_path: Path, clean_headwater: ServerProcess) -> None:
    mirror = tmp_path / "mirror"
    executable = install_provider(mirror)
    # dev_overrides wants a directory holding terraform-provider-headwater.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "terraform-provider-headwater").symlink_to(executable)
    cli_config = tmp_path / "dev.tfrc"
    cli_config.write_text(
        "provider_installation {\n"
        f'  dev_overrides {{ "headwater.io/headwater/headwater" = "{bin_dir}" }}\n'
        "  direct {}\n}\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    env = base_env(work)
    env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    tf = Terraform(work, env)
    body = CONFIG.replace(
        'provider "headwater" {}',
        f'provider "headwater" {{\n  servers = "{clean_headwater.url}"\n}}',
    )
    (work / "main.tf").write_text(body)
    outcome = tf.apply()
    assert "Provider development overrides are in effect" in outcome.output
    assert stream_info(clean_headwater, "ORDERS") is not None
    assert PROVIDER_VERSION in executable.name


@pytest.mark.slow
def test_a_committed_lock_file_holds_on_another_machine(
    tmp_path: Path, clean_headwater: ServerProcess
) -> None:
    """The lock file pins the provider's hash. The launcher used to hold the absolute path of
    the interpreter it was installed from, so a teammate's or CI's install (another path)
    hashed differently and ``terraform init`` refused the committed lock file."""
    work = tmp_path / "work"
    work.mkdir()
    env = base_env(work)
    env["NATS_URL"] = clean_headwater.url
    tf = Terraform(work, env)
    (work / "main.tf").write_text(CONFIG)
    for machine in ("laptop", "ci"):
        # Each machine: its own mirror, and its own path to an interpreter with headwater.
        home = tmp_path / machine
        (home / "bin").mkdir(parents=True)
        python = home / "bin" / "python3"
        python.symlink_to(sys.executable)
        mirror = home / "mirror"
        install_provider(mirror)
        (home / "cli.tfrc").write_text(cli_config(mirror))
        env["TF_CLI_CONFIG_FILE"] = str(home / "cli.tfrc")
        env["HEADWATER_PYTHON"] = str(python)
        if machine == "ci":
            shutil.rmtree(work / ".terraform")  # a fresh clone: only the lock file is committed
        init = tf.run("init", "-no-color", "-input=false")
        assert init.returncode == 0, init.output
        assert tf.plan().returncode == 2
