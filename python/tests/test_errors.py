# SPDX-License-Identifier: Apache-2.0
"""Every C++ exception type maps to its Python class, with its attributes."""
import pytest

import wisp
from wisp import _wisp


@pytest.mark.parametrize("kind, cls, base", [
    ("logic", wisp.LogicError, ValueError),
    ("format", wisp.FormatError, ValueError),
    ("file_format", wisp.FormatError, ValueError),
    ("infeasible", wisp.InfeasibleError, ValueError),
    ("infeasible_with_budget", wisp.InfeasibleError, ValueError),
    ("out_of_memory", wisp.OutOfMemoryError, MemoryError),
    ("error", wisp.Error, Exception),
])
def test_every_cpp_exception_maps_to_its_class(kind, cls, base):
    with pytest.raises(cls, match="the message") as e:
        _wisp._raise_error(kind, "the message")
    assert isinstance(e.value, base) and isinstance(e.value, wisp.Error)
    if kind == "error":
        assert type(e.value) is wisp.Error
    if cls is wisp.FormatError:
        assert e.value.offset == 7 and e.value.path == ("f" if kind == "file_format" else None)
    if cls is wisp.InfeasibleError:
        assert e.value.minimum_budget == (42 if kind == "infeasible_with_budget" else None)


def test_library_errors_reach_python_as_their_classes(tmp_path):
    afile = tmp_path / "not_a_folder"
    afile.write_text("x")
    with pytest.raises(wisp.Error, match="it is not a folder") as e:
        wisp.Trace.import_esft(afile)
    assert type(e.value) is wisp.Error
    with pytest.raises(wisp.LogicError, match="top_k"):
        wisp.ModelSpec("m", layers=2, experts=4, top_k=5, expert_bytes=1, kv_bytes_per_token=1)
    with pytest.raises(wisp.LogicError, match="unknown unit"):
        wisp.parse_byte_size("12 parsecs")
