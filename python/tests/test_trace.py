# SPDX-License-Identifier: Apache-2.0
"""Trace: constructors, .wtrace round trips, importers, columns, and bad files."""
import json

import numpy as np
import pytest

import wisp


def test_from_arrays_round_trips_through_wtrace(tmp_path):
    rng = np.random.default_rng(3)
    ids = np.stack([np.stack([rng.choice(10, 3, replace=False) for _ in range(2)])
                    for _ in range(50)]).astype(np.int32)
    weights = rng.random(ids.shape, dtype=np.float32)
    t = wisp.Trace.from_arrays(ids, experts=10, weights=weights, sequence_starts=[0, 20])
    assert (t.steps, t.layers, t.experts, t.top_k, len(t)) == (50, 2, 10, 3, 300)
    assert np.array_equal(t.ids(), ids) and np.array_equal(t.weights(), weights)
    assert t.sequence_starts.tolist() == [0, 20]
    path = tmp_path / "t.wtrace"
    t.write(path)
    assert wisp.Trace.read(path) == t


def test_columns_follow_the_canonical_order(small_trace):
    t = small_trace
    ids = t.ids()
    cols = t.columns()
    steps, layers, k = ids.shape
    assert np.array_equal(cols["expert"], ids.ravel())
    assert np.array_equal(cols["step"], np.repeat(np.arange(steps), layers * k))
    assert np.array_equal(cols["layer"], np.tile(np.repeat(np.arange(layers), k), steps))
    chunks = list(t.iter_columns(chunk=1000))
    assert [len(c["expert"]) for c in chunks][:-1] == [1000] * (len(chunks) - 1)
    for key in ("step", "layer", "expert"):
        assert np.array_equal(np.concatenate([c[key] for c in chunks]), cols[key])
    part = t.columns(17, 40)
    assert np.array_equal(part["expert"], cols["expert"][17:40])


def test_synthetic_is_deterministic_and_configurable():
    a = wisp.Trace.synthetic(steps=64, seed=5)
    assert a == wisp.Trace.synthetic(steps=64, seed=5) and a != wisp.Trace.synthetic(steps=64, seed=6)
    q = wisp.Trace.synthetic("qwen3-30b-a3b", steps=8, experts=64)
    assert (q.layers, q.experts, q.top_k) == (48, 64, 8)
    with pytest.raises(wisp.LogicError, match="unknown synthetic preset"):
        wisp.Trace.synthetic("nope")
    with pytest.raises(wisp.LogicError, match="unknown parameter 'colour'"):
        wisp.Trace.synthetic(colour=1)


def test_jsonl_import(tmp_path):
    path = tmp_path / "r.jsonl"
    records = [{"layer": l, "experts": [t, (t + l + 1) % 5], "token_idx": t, "req": "a"}
               for t in range(3) for l in range(2)]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    t = wisp.Trace.import_jsonl(path, group_key="req")
    assert (t.steps, t.layers, t.experts, t.top_k) == (3, 2, 5, 2)
    assert t.ids()[2, 1].tolist() == [2, (2 + 1 + 1) % 5]


def test_esft_import_matches_the_text(esft_dir, esft):
    assert (esft.steps, esft.layers, esft.experts, esft.top_k) == (8222, 26, 64, 6)
    first = (esft_dir / "expert_weights_1.txt").read_text().split("\n", 1)[0]
    ids = [int(x) for x in first.split("\t\t")[0].split("\t")]
    assert esft.ids()[0, 0].tolist() == ids[:6]  # token 0 of line 0, layer 0
    assert esft.sequence_starts[0] == 0 and len(esft.sequence_starts) == 127


def test_bad_files_raise_format_errors_with_offset_and_path(tmp_path, small_trace):
    good = tmp_path / "good.wtrace"
    small_trace.write(good)
    data = bytearray(good.read_bytes())
    data[100] ^= 0xFF  # corrupt the payload: the CRC check fails
    bad = tmp_path / "bad.wtrace"
    bad.write_bytes(bytes(data))
    with pytest.raises(wisp.FormatError) as e:
        wisp.Trace.read(bad)
    assert e.value.path == str(bad) and isinstance(e.value.offset, int)
    assert isinstance(e.value, ValueError)
    truncated = tmp_path / "short.wtrace"
    truncated.write_bytes(bytes(data[:40]))
    with pytest.raises(wisp.FormatError) as e:
        wisp.Trace.read(truncated)
    assert e.value.offset is not None and e.value.offset <= 40
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"layer": 0, "experts": [1, 1], "token_idx": 0}\n')
    with pytest.raises(wisp.FormatError, match="line 1") as e:
        wisp.Trace.import_jsonl(jsonl)
    assert e.value.path == str(jsonl)
    with pytest.raises(FileNotFoundError):
        wisp.Trace.read(tmp_path / "missing.wtrace")


def test_from_arrays_rejects_bad_input():
    ids = np.zeros((2, 1, 2), dtype=np.int32)
    with pytest.raises(wisp.LogicError, match="chosen twice"):
        wisp.Trace.from_arrays(ids, experts=4)
    ok = np.array([[[0, 1]], [[1, 2]]], dtype=np.int32)
    with pytest.raises(wisp.LogicError, match="out of range"):
        wisp.Trace.from_arrays(ok, experts=2)
    with pytest.raises(wisp.LogicError, match="sequence_starts"):
        wisp.Trace.from_arrays(ok, experts=4, sequence_starts=[1, 0])
