# SPDX-License-Identifier: Apache-2.0
"""docs/python.md's quick start runs as written."""
import pathlib
import re


def test_quick_start_runs(capsys):
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    section = doc.split("## Quick start", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 25
    exec(compile(code, "docs/python.md", "exec"), {})
    out = capsys.readouterr().out
    assert "slots/layer for 80% hits; expert 42 is in slot" in out
