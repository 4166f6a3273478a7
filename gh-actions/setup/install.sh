#!/usr/bin/env bash
# Install headwater into the environment of $HW_PYTHON (default python3).
#
# HW_VERSION picks what to install:
#   empty             this action's own checkout (the repository holding gh-actions/), so
#                     `uses: org/headwater/gh-actions/plan@v1` runs the CLI of tag v1;
#   1.2.3             that release from the package index (headwater[cli]==1.2.3);
#   anything else     a pip requirement as is: git+https://github.com/org/headwater@ref,
#                     headwater>=0.2, a wheel path or URL (name the extras in it yourself).
# HW_EXTRAS: the extras of the first two forms (default cli; the verify action: cli,verify).
#
# HW_INSTALL, when set (every action but setup passes its `install` input), says whether to
# install at all, with the boolean spellings every input accepts (lib.sh's hw_true).
set -euo pipefail

if [[ -n "${HW_INSTALL+set}" ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
  if ! hw_true "$HW_INSTALL"; then
    echo "install is '$HW_INSTALL': headwater is not installed by this action"
    exit 0
  fi
fi

python="${HW_PYTHON:-python3}"
version="${HW_VERSION:-}"
# The roles to install (pyproject.toml's extras): the CLI, and PySpark only for verify.
extras="${HW_EXTRAS:-cli}"
extras="${extras// /}"

if [[ -z "$version" ]]; then
  # Every action lives in gh-actions/<name>/, two levels below the repository root.
  requirement="$(cd "$GITHUB_ACTION_PATH/../.." && pwd)[$extras]"
elif [[ "$version" =~ ^[0-9][0-9A-Za-z.!+-]*$ ]]; then
  requirement="headwater[$extras]==$version"
else
  requirement="$version"
fi

echo "Installing headwater from: $requirement"
"$python" -m pip install --disable-pip-version-check "$requirement"

installed="$("$python" -c 'import importlib.metadata as m; print(m.version("headwater"))')"
echo "headwater $installed installed"
if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
  echo "version=$installed" >>"$GITHUB_OUTPUT"
fi
