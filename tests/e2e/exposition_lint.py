"""The checks ``promtool check metrics`` makes of a scrape (Prometheus' text parser, then its
``promlint``), written out for the tests: the Debian ``prometheus`` package that ships promtool is
~96 MB installed, too much for the test setup.

``problems(text)`` lists what promtool would report, empty when it passes: a line that does not
parse (names, labels, escapes, values), HELP or TYPE after a family's samples or twice, a family
whose samples are split or repeated (a duplicate family), a duplicate series, a counter whose name
does not end in ``_total`` and a non-counter whose name does, ``_count``/``_sum``/``_bucket`` on a
family that is not a histogram or summary, camelCase or ``:`` in names, unit abbreviations
(``_ms``, ``_sec``, ``_kb``, ...) and a family without HELP.
"""

from __future__ import annotations

import math
import re

__all__ = ["problems"]

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(\{{(?:{LABEL}={LABEL_VALUE}(?:,{LABEL}={LABEL_VALUE})*,?)?\}})? (\S+)( -?\d+)?$")
PAIR = re.compile(rf"({LABEL})=({LABEL_VALUE})")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
ABBREVIATIONS = {"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"}


def _family_of(sample: str, types: dict[str, str]) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        base = sample.removesuffix(suffix)
        if base != sample and types.get(base) in ("histogram", "summary"):
            return base
    return sample


def problems(text: str) -> list[str]:
    out: list[str] = []
    types: dict[str, str] = {}
    helps: set[str] = set()
    sampled: set[str] = set()  # families whose samples have started
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    current = ""
    if not text.endswith("\n"):
        out.append("the last line does not end with a newline")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue  # a plain comment
            kind, name = parts[1], parts[2]
            if not re.fullmatch(NAME, name):
                out.append(f"line {number}: invalid metric name {name!r}")
            if name in sampled:
                out.append(f"line {number}: {kind} for {name} after its samples (a second family of that name)")
            if kind == "TYPE":
                value = parts[3].strip() if len(parts) > 3 else ""
                if value not in TYPES:
                    out.append(f"line {number}: unknown type {value!r}")
                if name in types:
                    out.append(f"line {number}: second TYPE line for {name}")
                types[name] = value
            else:
                if name in helps:
                    out.append(f"line {number}: second HELP line for {name}")
                helps.add(name)
            continue
        m = SAMPLE.match(line)
        if m is None:
            out.append(f"line {number}: does not parse: {line!r}")
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        try:
            float(value) if value not in ("+Inf", "-Inf", "NaN") else math.nan
        except ValueError:
            out.append(f"line {number}: value {value!r} is not a number")
        family = _family_of(name, types)
        if family != current and family in sampled:
            out.append(f"line {number}: samples of {family} are not together (a duplicate family)")
        current = family
        sampled.add(family)
        pairs = tuple(sorted(PAIR.findall(labels)))
        if len({k for k, _ in pairs}) != len(pairs):
            out.append(f"line {number}: a label given twice in {line!r}")
        if (name, pairs) in series:
            out.append(f"line {number}: duplicate series {name}{labels}")
        series.add((name, pairs))
        for label, _ in pairs:
            if label != label.lower():
                out.append(f"line {number}: label name {label!r} is camelCase")
    for family in sorted(sampled | types.keys()):
        kind = types.get(family, "untyped")
        if kind == "counter" and not family.endswith("_total"):
            out.append(f"{family}: counter metrics should have \"_total\" suffix")
        if kind != "counter" and family.endswith("_total"):
            out.append(f"{family}: non-counter metrics should not have \"_total\" suffix")
        if kind not in ("histogram", "summary") and family.endswith(("_count", "_sum", "_bucket")):
            out.append(f"{family}: non-histogram and non-summary metrics should not have a _count, _sum or "
                       "_bucket suffix")
        if family != family.lower():
            out.append(f"{family}: metric names should be written in 'snake_case' not 'camelCase'")
        if ":" in family:
            out.append(f"{family}: metric names should not contain ':'")
        for part in family.split("_"):
            if part in ABBREVIATIONS:
                out.append(f"{family}: metric names should not contain abbreviated units ({part})")
        if family not in helps:
            out.append(f"{family}: no help text")
    return out
