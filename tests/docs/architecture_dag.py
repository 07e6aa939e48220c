#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks docs/architecture.md's include DAG against the real includes.

Every header or .inl under include/wisp/<area>/ and cuda/include/wisp/cuda/ is scanned for
`#include <wisp/<other>/...>`; the set of (area, other) edges must equal the ```dag block of the
page (`area -> a, b, ...`, one line per area), every area must be listed, and the graph must have
no cycle. Each area's `detail` namespace is private to it: a `detail::NAME` used in one area must
be declared in a `detail` namespace of that area or of core (whose internals every area may use).
Exit 1 with the differences otherwise.

  python3 tests/docs/architecture_dag.py [repository root]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

INCLUDE_RE = re.compile(r"^\s*#\s*include\s*<wisp/([a-z_0-9]+)/", re.M)
LINE_RE = re.compile(r"^([a-z_0-9]+)\s*->\s*(.*)$")


def real_edges(root: Path) -> dict[str, set[str]]:
    trees = [(root / "include" / "wisp", None), (root / "cuda" / "include" / "wisp" / "cuda", "cuda")]
    edges: dict[str, set[str]] = {}
    for base, fixed in trees:
        for f in sorted(base.rglob("*")):
            if f.suffix not in (".hpp", ".inl", ".cuh"):
                continue
            parts = f.relative_to(base).parts
            if fixed is None and len(parts) < 2:
                continue  # wisp.hpp, version.hpp: the umbrella and the version, not an area
            area = fixed or parts[0]
            deps = edges.setdefault(area, set())
            for other in INCLUDE_RE.findall(f.read_text(encoding="utf-8")):
                if other != area:
                    deps.add(other)
    return edges


DETAIL_OPEN_RE = re.compile(r"namespace\s+(?:wisp::(?:cuda::)?)?detail\s*\{")
DETAIL_USE_RE = re.compile(r"\bdetail::([A-Za-z_][A-Za-z_0-9]*)")
# Comments, then string and character literals (their braces would unbalance a namespace).
NOISE_RE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])+'", re.S)


def area_sources(root: Path) -> dict[str, list[tuple[Path, str]]]:
    """Every area's headers, with comments and literals blanked out."""
    trees = [(root / "include" / "wisp", None), (root / "cuda" / "include" / "wisp" / "cuda", "cuda")]
    out: dict[str, list[tuple[Path, str]]] = {}
    for base, fixed in trees:
        for f in sorted(base.rglob("*")):
            parts = f.relative_to(base).parts
            if f.suffix not in (".hpp", ".inl", ".cuh") or (fixed is None and len(parts) < 2):
                continue
            text = NOISE_RE.sub(" ", f.read_text(encoding="utf-8"))
            out.setdefault(fixed or parts[0], []).append((f, text))
    return out


def detail_regions(text: str) -> str:
    """The bodies of the `detail` namespaces of one header."""
    out = []
    for m in DETAIL_OPEN_RE.finditer(text):
        i, depth = m.end(), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i])
    return "\n".join(out)


def declares(region: str, name: str) -> bool:
    """Whether `region` declares `name`: a type, alias or concept, a function with its body, or a
    variable."""
    patterns = (rf"(?:struct|class|union|using|concept|enum(?:\s+class)?)\s+{name}\b",
                rf"\b{name}\s*\([^;{{]*\)\s*(?:const\s*)?(?:noexcept(?:\([^)]*\))?\s*)?"
                rf"(?:->[^{{;]*)?\{{",
                rf"\b{name}\s*(?:=|\{{|\[)")
    return any(re.search(p, region) for p in patterns)


def foreign_details(root: Path) -> list[str]:
    """Uses of another area's `detail` names, as 'file uses area's detail::NAME'."""
    sources = area_sources(root)
    regions = {a: "\n".join(detail_regions(t) for _, t in fs) for a, fs in sources.items()}
    problems = []
    for area, fs in sorted(sources.items()):
        for f, text in fs:
            for name in sorted(set(DETAIL_USE_RE.findall(text))):
                if declares(regions[area], name) or declares(regions.get("core", ""), name):
                    continue
                owners = [a for a in sorted(regions) if declares(regions[a], name)] or ["no area"]
                problems.append(f"{f.relative_to(root)} uses {', '.join(owners)}'s detail::{name}"
                                " (make it public, or keep it in its area)")
    return problems


def documented_edges(page: Path) -> dict[str, set[str]]:
    m = re.search(r"^```dag\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)
    if not m:
        sys.exit(f"{page}: no ```dag block")
    edges: dict[str, set[str]] = {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        if not line.strip():
            continue
        lm = LINE_RE.match(line.strip())
        if not lm:
            sys.exit(f"{page}: dag line {n} is not 'area -> a, b': {line!r}")
        if lm.group(1) in edges:
            sys.exit(f"{page}: area {lm.group(1)} is listed twice")
        edges[lm.group(1)] = {d.strip() for d in lm.group(2).split(",") if d.strip()}
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(a: str) -> list[str] | None:
        state[a] = 1
        stack.append(a)
        for b in sorted(edges.get(a, ())):
            if state.get(b) == 1:
                return stack[stack.index(b):] + [b]
            if b not in state and (found := visit(b)):
                return found
        stack.pop()
        state[a] = 2
        return None

    for a in sorted(edges):
        if a not in state and (found := visit(a)):
            return found
    return None


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    real = real_edges(root)
    documented = documented_edges(root / "docs" / "architecture.md")
    problems = []
    for area in sorted(set(real) | set(documented)):
        if area not in documented:
            problems.append(f"area {area} (includes {sorted(real[area])}) is not in the page")
            continue
        if area not in real:
            problems.append(f"area {area} is in the page but has no headers")
            continue
        for dep in sorted(real[area] - documented[area]):
            problems.append(f"{area} includes {dep}, which the page does not list")
        for dep in sorted(documented[area] - real[area]):
            problems.append(f"the page lists {area} -> {dep}, which no header includes")
    if found := cycle(real):
        problems.append("include cycle: " + " -> ".join(found))
    if problems:
        print("docs/architecture.md's include DAG is out of date:\n  " + "\n  ".join(problems))
        return 1
    if foreign := foreign_details(root):
        print("an area uses another area's internals:\n  " + "\n  ".join(foreign))
        return 1
    print(f"include DAG of {len(real)} areas matches docs/architecture.md; "
          "no area uses another's detail namespace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
