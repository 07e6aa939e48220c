#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Amalgamates wisp's core into one header: single_include/wisp/wisp.hpp.

Starting from include/wisp/wisp.hpp (the umbrella), every `#include <wisp/...>` is replaced by the
file's contents, recursively and once per file (what `#pragma once` gives). C++ standard library
includes that sit outside any `#if` block are deduplicated and emitted once, at the place the first
of them appeared (after the version and the compiler checks of core/config.hpp); every other
include (system headers, anything inside `#if`/`#ifdef` such as posix_vmm.hpp's Linux headers)
stays where it is. The CUDA component (cuda/include) is not part of the single header.

  python3 tools/amalgamate.py                     # (re)writes single_include/wisp/wisp.hpp
  python3 tools/amalgamate.py --check             # exit 1 with a message if that file is stale
  python3 tools/amalgamate.py --namespace acme -o third_party/acme/wisp.hpp
        # a vendored copy: namespace wisp -> acme (also `::wisp::` inside macros) and every macro
        # WISP_* -> ACME_*, so that it can share a translation unit with another copy of wisp

The output is deterministic (no dates, no absolute paths): CI regenerates it and compares.
Only the standard library is needed (Python >= 3.8).
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE_DIR = ROOT / "include"
UMBRELLA = "wisp/wisp.hpp"
DEFAULT_OUTPUT = ROOT / "single_include" / "wisp" / "wisp.hpp"

# Headers of the C++ standard library (C++23 list plus the <cxxx> C headers): only these are
# hoisted. Anything else (<unistd.h>, ...) may depend on macros defined before it and stays put.
STD_HEADERS = frozenset(
    """
    algorithm any array atomic barrier bit bitset charconv chrono codecvt compare complex concepts
    condition_variable coroutine deque exception execution expected filesystem flat_map flat_set
    format forward_list fstream functional future generator initializer_list iomanip ios iosfwd
    iostream istream iterator latch limits list locale map mdspan memory memory_resource mutex new
    numbers numeric optional ostream print queue random ranges ratio regex scoped_allocator
    semaphore set shared_mutex source_location span spanstream sstream stack stacktrace stdexcept
    stdfloat stop_token streambuf string string_view strstream syncstream system_error thread
    tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant
    vector version
    cassert cctype cerrno cfenv cfloat cinttypes climits clocale cmath csetjmp csignal cstdarg
    cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
    """.split()
)

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]\s*(?://.*|/\*.*\*/\s*)?$')
PRAGMA_ONCE_RE = re.compile(r"^\s*#\s*pragma\s+once\b")
SPDX_RE = re.compile(r"^\s*//\s*SPDX-License-Identifier:")
COND_OPEN_RE = re.compile(r"^\s*#\s*if(n?def)?\b")
COND_CLOSE_RE = re.compile(r"^\s*#\s*endif\b")
DEFINE_RE = re.compile(r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)")
VERSION_RE = re.compile(r"^#define WISP_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)$", re.M)
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AmalgamateError(Exception):
    pass


def read_version() -> str:
    text = (INCLUDE_DIR / "wisp" / "version.hpp").read_text(encoding="utf-8")
    parts = dict(VERSION_RE.findall(text))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        raise AmalgamateError("cannot read WISP_VERSION_{MAJOR,MINOR,PATCH} from include/wisp/version.hpp")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


class Amalgamator:
    def __init__(self) -> None:
        self.seen: set[str] = set()  # wisp headers already inlined (#pragma once)
        self.std_seen: set[str] = set()  # hoisted standard headers
        self.std_order: list[str] = []
        self.hoist_marker_emitted = False
        self.out: list[str] = []

    def run(self) -> list[str]:
        self.inline(UMBRELLA, chain=())
        # The hoisted standard includes replace the marker line emitted at the first of them.
        block = ["// Standard library headers used by wisp (deduplicated)."]
        block += [f"#include <{h}>" for h in sorted(self.std_order)]
        result: list[str] = []
        for line in self.out:
            if line is _HOIST_MARKER:
                result.extend(block)
            else:
                result.append(line)
        return result

    def inline(self, name: str, chain: tuple[str, ...]) -> None:
        if name in self.seen:
            return
        path = INCLUDE_DIR / name
        if not path.is_file():
            via = " <- ".join(reversed(chain)) or "the command line"
            raise AmalgamateError(f"#include <{name}> (from {via}) does not exist under include/")
        self.seen.add(name)
        lines = path.read_text(encoding="utf-8").splitlines()
        if not any(PRAGMA_ONCE_RE.match(l) for l in lines):
            raise AmalgamateError(f"include/{name} has no #pragma once: the amalgamation assumes it")
        self.out.append("")
        self.out.append(f"// ---- begin {name} " + "-" * max(0, 84 - len(name)))
        depth = 0
        for number, line in enumerate(lines, 1):
            where = f"include/{name}:{number}"
            if PRAGMA_ONCE_RE.match(line) or SPDX_RE.match(line):
                continue
            m = INCLUDE_RE.match(line)
            if m:
                bracket, target = m.group(1), m.group(2).strip()
                if target.startswith("wisp/"):
                    if bracket != "<":
                        raise AmalgamateError(f'{where}: use #include <{target}>, not "..."')
                    if depth:
                        raise AmalgamateError(
                            f"{where}: #include <{target}> inside #if is not supported by the "
                            "amalgamation (it would inline the header conditionally, once)")
                    self.inline(target, chain + (name,))
                    continue
                if bracket == "<" and target in STD_HEADERS and depth == 0:
                    if not self.hoist_marker_emitted:
                        self.out.append(_HOIST_MARKER)
                        self.hoist_marker_emitted = True
                    if target not in self.std_seen:
                        self.std_seen.add(target)
                        self.std_order.append(target)
                    continue
                if bracket == '"':
                    raise AmalgamateError(f'{where}: quoted #include "{target}" is not supported')
            if COND_OPEN_RE.match(line):
                depth += 1
            elif COND_CLOSE_RE.match(line):
                depth -= 1
                if depth < 0:
                    raise AmalgamateError(f"{where}: #endif without #if")
            self.out.append(line)
        if depth != 0:
            raise AmalgamateError(f"include/{name}: unbalanced #if/#endif")
        self.out.append(f"// ---- end {name} " + "-" * max(0, 86 - len(name)))


class _Marker(str):
    pass


_HOIST_MARKER = _Marker("")

# ------------------------------------------------------------------------------------- renaming

# One C++ token or a run of characters the renamer leaves alone. Order matters: comments and
# literals first, so that `wisp` inside them is not touched (file-format magics such as
# "wisp-reuse-histogram" must stay byte-identical across vendored copies).
_TOKEN_RE = re.compile(
    r"""
      (?P<comment>//(?:\\\n|[^\n])*|/\*.*?\*/)
    | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")
    | (?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
    | (?P<char>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])+')
    | (?P<number>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<other>.|\n)
    """,
    re.X | re.S,
)


def rename(text: str, namespace: str) -> str:
    """namespace `wisp` -> `namespace`, macros `WISP_*` -> `NAMESPACE_*`, in code only: comments,
    string and character literals are copied unchanged."""
    macro_prefix = namespace.upper() + "_"
    parts: list[str] = []
    for m in _TOKEN_RE.finditer(text):
        tok = m.group(0)
        if m.lastgroup == "ident":
            if tok == "wisp":
                tok = namespace
            elif tok.startswith("WISP_"):
                tok = macro_prefix + tok[len("WISP_"):]
        parts.append(tok)
    return "".join(parts)


def check_macros(lines: list[str], prefix: str) -> None:
    bad = sorted({m.group(1) for l in lines if (m := DEFINE_RE.match(l)) and not m.group(1).startswith(prefix)})
    if bad:
        raise AmalgamateError(
            f"macros without the {prefix} prefix would clash between vendored copies: {', '.join(bad)}")


# ------------------------------------------------------------------------------------- output


def banner(version: str, namespace: str) -> list[str]:
    lines = [
        "// SPDX-License-Identifier: Apache-2.0",
        f"// wisp {version}: header-only C++20 Mixture-of-Experts memory-management primitives.",
        "// Single-header amalgamation of the core (include/wisp/, no CUDA component). Copyright the",
        "// wisp authors, licensed under the Apache License, Version 2.0 (the \"License\"); you may",
        "// not use this file except in compliance with the License. You may obtain a copy at",
        "//     http://www.apache.org/licenses/LICENSE-2.0",
        "// Unless required by applicable law or agreed to in writing, software distributed under the",
        "// License is distributed on an \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND.",
        "//",
        "// GENERATED by tools/amalgamate.py from include/wisp/wisp.hpp: do not edit; edit include/",
        "// and rerun `python3 tools/amalgamate.py`. Compile with -std=c++20 (GCC >= 11, clang >= 14,",
        "// MSVC 19.30).",
    ]
    if namespace != "wisp":
        lines += [
            "//",
            f"// Vendored copy (--namespace {namespace}): namespace wisp is `{namespace}` and every macro",
            f"// WISP_* is {namespace.upper()}_*; comments still say wisp. It can share a translation",
            "// unit with other copies of wisp.",
        ]
    lines += ["#pragma once"]
    return lines


def generate(namespace: str) -> str:
    version = read_version()
    body = Amalgamator().run()
    check_macros(body, "WISP_")
    text = "\n".join(banner(version, namespace) + body) + "\n"
    text = re.sub(r"\n{3,}", "\n\n", text)
    if namespace != "wisp":
        text = rename(text, namespace)
        check_macros(text.splitlines(), namespace.upper() + "_")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path,
                        help="file to write or check (default: single_include/wisp/wisp.hpp; "
                             "required with --namespace; '-' writes to stdout)")
    parser.add_argument("--namespace", default="wisp",
                        help="rename namespace wisp and the WISP_ macro prefix (vendoring)")
    parser.add_argument("--check", action="store_true",
                        help="do not write: exit 1 if the output file differs from what would be generated")
    args = parser.parse_args(argv)

    ns = args.namespace
    if not IDENT_RE.match(ns) or ns.startswith("__") or ns in {"std", "detail"}:
        parser.error(f"--namespace {ns!r} is not a usable C++ namespace name")
    if ns.upper() == "WISP" and ns != "wisp":
        parser.error("--namespace must differ from wisp in more than case (the macro prefix would clash)")
    if args.output is None:
        if ns != "wisp":
            parser.error("--namespace needs --output: single_include/wisp/wisp.hpp is the default copy")
        args.output = DEFAULT_OUTPUT

    try:
        text = generate(ns)
    except AmalgamateError as e:
        print(f"amalgamate.py: error: {e}", file=sys.stderr)
        return 2

    shown = _display(args.output)
    if args.check:
        if str(args.output) == "-":
            parser.error("--check needs a file")
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current == text:
            print(f"amalgamate.py: {shown} is up to date")
            return 0
        what = "does not exist" if current is None else "is stale (include/ changed since it was generated)"
        print(f"amalgamate.py: {shown} {what}.", file=sys.stderr)
        if current is not None:
            diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(),
                                             f"{shown} (checked in)", f"{shown} (from include/)",
                                             lineterm="", n=1))
            sys.stderr.write("\n".join(diff[:60]) + ("\n  [...]\n" if len(diff) > 60 else "\n"))
        fix = "python3 tools/amalgamate.py" + ("" if ns == "wisp" else f" --namespace {ns} -o {shown}")
        print(f"amalgamate.py: regenerate it with `{fix}` and commit the result.", file=sys.stderr)
        return 1

    if str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.output.is_file() and args.output.read_text(encoding="utf-8") == text:
        print(f"amalgamate.py: {shown} is up to date")
        return 0
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"amalgamate.py: wrote {shown} ({text.count(chr(10))} lines, {len(text.encode())} bytes)")
    return 0


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
