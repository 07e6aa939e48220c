# SPDX-License-Identifier: Apache-2.0
"""The suite tests the installed package, not the source tree (python/test.sh sets
WISP_INSTALLED_PREFIX to the venv the wheel was installed into)."""
import os
import pathlib

import pytest

import wisp


def test_wisp_comes_from_the_installed_wheel():
    prefix = os.environ.get("WISP_INSTALLED_PREFIX")
    if not prefix:
        pytest.skip("WISP_INSTALLED_PREFIX is not set (python/test.sh sets it)")
    package = pathlib.Path(wisp.__file__).resolve().parent
    assert package.is_relative_to(pathlib.Path(prefix).resolve()), package
    assert (package / "_wisp.pyi").is_file() and (package / "py.typed").is_file()
    assert wisp._wisp.__file__.startswith(str(package))


def test_version_matches_the_headers():
    header = pathlib.Path(__file__).resolve().parents[2] / "include" / "wisp" / "version.hpp"
    parts = {}
    for line in header.read_text().splitlines():
        for part in ("MAJOR", "MINOR", "PATCH"):
            if line.startswith(f"#define WISP_VERSION_{part} "):
                parts[part] = line.split()[-1]
    assert wisp.__version__ == f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
