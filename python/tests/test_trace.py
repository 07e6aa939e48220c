# SPDX-License-Identifier: Apache-2.0
"""Trace: constructors, .wtrace round trips, importers, columns, and bad files."""
import json
import os
import pathlib
import subprocess
import sys

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


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def gapped_jsonl(tmp_path):
    """Three tokens x two layers of one request, token 1 lacking layer 1."""
    records = [{"layer": l, "experts": [t, (t + l + 1) % 5], "token_idx": t, "req": "a"}
               for t in range(3) for l in range(2) if (t, l) != (1, 1)]
    path = tmp_path / "gap.jsonl"
    write_jsonl(path, records)
    full = np.array([[[t, (t + l + 1) % 5] for l in range(2)] for t in range(3)], dtype=np.int32)
    return path, full


def test_jsonl_on_incomplete(tmp_path):
    path, full = gapped_jsonl(tmp_path)
    with pytest.raises(wisp.FormatError, match="token") as e:
        wisp.Trace.import_jsonl(path, group_key="req")
    assert e.value.path == str(path)
    with pytest.raises(wisp.LogicError, match="on_incomplete must be 'error', 'skip' or 'keep'"):
        wisp.Trace.import_jsonl(path, group_key="req", on_incomplete="drop")

    skipped = wisp.Trace.import_jsonl(path, group_key="req", on_incomplete="skip")
    assert isinstance(skipped, wisp.Trace) and isinstance(skipped, wisp.ImportedTrace)
    assert skipped.complete and skipped.steps == 2
    assert np.array_equal(skipped.ids(), full[[0, 2]])
    r = skipped.report
    assert (r.incomplete_tokens, r.missing_records, r.dropped_tokens, r.dropped_records,
            r.partial_tokens, r.incomplete_sequences) == (1, 1, 1, 1, 0, 1)

    kept = wisp.Trace.import_jsonl(path, group_key="req", on_incomplete="keep")
    assert not kept.complete and (kept.steps, kept.missing_rows, len(kept)) == (3, 1, 5 * 2)
    present = np.ones((3, 2), dtype=bool)
    present[1, 1] = False
    assert np.array_equal(kept.present(), present)
    expected = full.copy()
    expected[1, 1] = -1
    assert np.array_equal(kept.ids(), expected)
    r = kept.report
    assert (r.incomplete_tokens, r.missing_records, r.dropped_tokens, r.dropped_records,
            r.partial_tokens, r.incomplete_sequences) == (1, 1, 0, 0, 1, 1)
    # The kept trace is an ordinary Trace: equal to the one made from its arrays, its columns
    # skip the missing row, and it round-trips through .wtrace.
    assert kept.sequence_starts.tolist() == [0]
    assert wisp.Trace.from_arrays(expected, experts=5, sequence_starts=[0], present=present) == kept
    cols = kept.columns()
    held = [(s, l) for s in range(3) for l in range(2) if present[s, l]]
    assert cols["step"].tolist() == [s for s, _ in held for _ in range(2)]
    assert cols["expert"].tolist() == [e for s, l in held for e in full[s, l].tolist()]
    assert np.concatenate([c["expert"] for c in kept.iter_columns(chunk=3)]).tolist() == \
        cols["expert"].tolist()
    assert np.array_equal(kept.columns(3, 7)["expert"], cols["expert"][3:7])
    kept.write(tmp_path / "kept.wtrace")
    assert wisp.Trace.read(tmp_path / "kept.wtrace") == kept


def test_complete_imports_report_nothing_missing(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [{"layer": l, "experts": [t, l + 2], "token_idx": t}
                       for t in range(2) for l in range(2)])
    for mode in ("error", "skip", "keep"):
        t = wisp.Trace.import_jsonl(path, on_incomplete=mode)
        assert t.complete and t.report == wisp.Trace.import_jsonl(path).report
        assert t.report.incomplete_tokens == 0 and t.report.missing_records == 0


def test_esft_on_incomplete(tmp_path):
    # Line 0: layer 1 holds two tokens, layer 2 only the first (a recorder stopped early).
    (tmp_path / "expert_weights_1.txt").write_text("0\t1\t2\t3\t\t0.5\t0.5\t0.25\t0.75\n")
    (tmp_path / "expert_weights_2.txt").write_text("1\t3\t\t0.5\t0.5\n")
    with pytest.raises(wisp.FormatError):
        wisp.Trace.import_esft(tmp_path, experts=4, top_k=2)
    skipped = wisp.Trace.import_esft(tmp_path, experts=4, top_k=2, on_incomplete="skip")
    assert skipped.complete and skipped.ids().tolist() == [[[0, 1], [1, 3]]]
    assert (skipped.report.dropped_tokens, skipped.report.dropped_records) == (1, 1)
    kept = wisp.Trace.import_esft(tmp_path, experts=4, top_k=2, on_incomplete="keep")
    assert kept.ids().tolist() == [[[0, 1], [1, 3]], [[2, 3], [-1, -1]]]
    assert kept.present().tolist() == [[True, True], [True, False]]
    w = kept.weights()
    assert w[1, 0].tolist() == [0.25, 0.75] and np.isnan(w[1, 1]).all()
    assert (kept.report.partial_tokens, kept.report.missing_records) == (1, 1)
    assert wisp.Trace.from_arrays(kept.ids(), kept.experts, w, kept.sequence_starts,
                                  kept.present()) == kept


def test_esft_import_reports_a_complete_log(esft):
    assert esft.complete and esft.missing_rows == 0
    r = esft.report
    assert (r.incomplete_tokens, r.missing_records, r.dropped_tokens, r.dropped_records,
            r.partial_tokens, r.incomplete_sequences) == (0, 0, 0, 0, 0, 0)


def test_absent_traces_skip_or_fail_when_required(tmp_path):
    """The rule of tests/support/traces.hpp: without the real trace a test skips, unless
    WISP_REQUIRE_TRACES is set, and then it fails."""
    test = f"{pathlib.Path(__file__).resolve()}::test_esft_import_matches_the_text"
    for required, outcome in (("0", "1 skipped"), ("1", "1 error")):
        env = dict(os.environ, WISP_TEST_TRACES_DIR=str(tmp_path / "none"),
                   WISP_REQUIRE_TRACES=required)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               "-rfEs", test], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert outcome in proc.stdout, proc.stdout
        assert ("WISP_REQUIRE_TRACES is set" in proc.stdout) == (required == "1"), proc.stdout
