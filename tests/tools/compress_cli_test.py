#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `wisp compress`: exact restoration, errors on damaged archives, and the
--inspect figures against an independent Python computation.

Usage: compress_cli_test.py WISP_BINARY
"""
import json
import math
import os
import random
import struct
import tempfile
import unittest

import cli_support
from cli_support import wisp


def bf16(x):
    """float -> BF16 bits, round to nearest even (finite x)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def gaussian_bf16_bytes(n, sigma, seed):
    rng = random.Random(seed)
    return struct.pack(f"<{n}H", *(bf16(rng.gauss(0.0, sigma)) for _ in range(n)))


def exponent_entropy(data):
    counts = [0] * 256
    for (v,) in struct.iter_unpack("<H", data):
        counts[(v >> 7) & 0xFF] += 1
    n = sum(counts)
    return -sum(c / n * math.log2(c / n) for c in counts if c)


def safetensors(tensors):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes (keys sorted, like the reference)."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


class CompressCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.raw = os.path.join(cls.tmp.name, "w.bf16")
        with open(cls.raw, "wb") as f:
            f.write(gaussian_bf16_bytes(20001, 0.02, 1))
        cls.st = os.path.join(cls.tmp.name, "m.safetensors")
        with open(cls.st, "wb") as f:
            f.write(safetensors([
                ("layer.0.w", "BF16", [100, 77], gaussian_bf16_bytes(7700, 0.05, 2)),
                ("layer.0.b", "F32", [3], struct.pack("<3f", 1.5, -2.0, 0.25)),
                ("layer.1.w", "BF16", [33], gaussian_bf16_bytes(33, 0.1, 3)),
            ]))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def round_trip(self, source, coder):
        packed, back = self.path(f"p.{coder}.wzar"), self.path(f"b.{coder}")
        wisp("compress", source, "-o", packed, "--coder", coder, "--e-chunks", "3")
        wisp("compress", "-d", packed, "-o", back)
        with open(source, "rb") as a, open(back, "rb") as b:
            self.assertEqual(a.read(), b.read(), f"{coder}: restored bytes differ")
        return os.path.getsize(packed)

    def test_every_coder_restores_exact_bytes(self):
        # The coders of this build (zstd and lz4 are optional), as --inspect lists them.
        inspected = json.loads(wisp("compress", "--inspect", self.raw, "--json").stdout)
        coders = {"raw"} | {name.split("-")[0] for name in inspected["total"]["coders"]}
        for coder in sorted(coders):
            for source in (self.raw, self.st):
                self.round_trip(source, coder)
        # Gaussian exponents carry ~2.5 bits: Huffman stores about (8 + 2.5) / 16 of the bytes.
        self.assertLess(self.round_trip(self.raw, "huffman"), 0.70 * os.path.getsize(self.raw))

    def test_damaged_archives_are_rejected_with_the_file_name(self):
        packed = self.path("d.wzar")
        wisp("compress", self.st, "-o", packed)
        with open(packed, "rb") as f:
            good = f.read()
        rng = random.Random(5)
        for cut in (0, 7, 31, len(good) // 2, len(good) - 1):
            bad = self.path("cut.wzar")
            with open(bad, "wb") as f:
                f.write(good[:cut])
            p = wisp("compress", "-d", bad, "-o", self.path("x"), ok=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("cut.wzar", p.stderr)
        for _ in range(20):
            b = bytearray(good)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            with open(self.path("flip.wzar"), "wb") as f:
                f.write(b)
            p = wisp("compress", "-d", self.path("flip.wzar"), "-o", self.path("x"), ok=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertRegex(p.stderr, r"wisp: .*flip\.wzar: at byte \d+")

    def test_bad_arguments(self):
        odd = self.path("odd.bf16")
        with open(odd, "wb") as f:
            f.write(b"\x01\x02\x03")
        p = wisp("compress", odd, "-o", self.path("x"), ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("even size", p.stderr)
        p = wisp("compress", self.raw, "-o", self.path("x"), "--coder", "brotli", ok=False)
        self.assertIn("unknown or unavailable coder 'brotli'", p.stderr)

    def test_inspect_json_matches_python(self):
        out = json.loads(wisp("compress", "--inspect", self.st, "--json", "--f32-as-bf16").stdout)
        names = [t["name"] for t in out["tensors"]]
        self.assertEqual(names, ["layer.0.w", "layer.0.b", "layer.1.w"])
        self.assertEqual(out["tensors"][1]["dtype"], "F32->BF16")
        with open(self.raw, "rb") as f:
            data = f.read()
        out = json.loads(wisp("compress", "--inspect", self.raw, "--json").stdout)
        t = out["tensors"][0]
        self.assertEqual(t["elements"], len(data) // 2)
        self.assertAlmostEqual(t["exponent_entropy_bits"], exponent_entropy(data), places=9)
        self.assertAlmostEqual(t["entropy_bound_ratio"], (8 + exponent_entropy(data)) / 16, places=9)
        for name, c in t["coders"].items():
            wisp("compress", self.raw, "-o", self.path("i.wzar"), "--coder", name.split("-")[0],
                 *(["--level", name.split("-")[1]] if "-" in name else []))
            # The archive adds its header and one descriptor with the name to the record.
            overhead = 32 + 32 + len("w.bf16")
            self.assertEqual(os.path.getsize(self.path("i.wzar")) - overhead, c["bytes"], name)
            self.assertAlmostEqual(c["ratio"], c["bytes"] / len(data))
            self.assertGreater(c["decode_gbps"], 0)


if __name__ == "__main__":
    cli_support.main()
