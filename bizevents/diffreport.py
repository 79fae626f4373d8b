"""``replay --diff``'s report as one static HTML file: the counts per contract, and the
first differing events side by side, field by field (no script, no external asset).

It reads the diff's plain form (:meth:`bizevents.replay.diff.DiffReport.as_dict`): per contract
the counts of each kind, and a few samples of each kind but ``equal``, each with its
event id and the event's content under ``a`` (``--diff``'s version) and ``b``
(``--translator``'s).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

KINDS = ("equal", "changed", "only_a", "only_b")
MISSING = object()

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.differs td { background: #fff3cd; } tr.differs td.b { background: #d1f2d9; }
tr.differs td.a { background: #f8d7da; } code { font-size: 13px; }
.id { color: #666; font-size: 12px; }
"""


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested records as dotted field names, so that a changed sub-field shows alone."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _cell(value: Any) -> str:
    if value is MISSING:
        return "<em>absent</em>"
    return f"<code>{escape(json.dumps(value, default=str, ensure_ascii=False))}</code>"


def fields_side_by_side(sample: dict[str, Any]) -> list[tuple[str, Any, Any, bool]]:
    """``(field, value in A, value in B, differs)`` for every field of either side."""
    a, b = _flat(sample.get("a", {})), _flat(sample.get("b", {}))
    names = list(a) + [name for name in b if name not in a]
    rows = []
    for name in names:
        left, right = a.get(name, MISSING), b.get(name, MISSING)
        rows.append((name, left, right, left != right))
    return rows


def _sample_table(sample: dict[str, Any], label_a: str, label_b: str) -> str:
    rows = "".join(
        f'<tr class="{"differs" if differs else "same"}"><th>{escape(name)}</th>'
        f'<td class="a">{_cell(left)}</td><td class="b">{_cell(right)}</td></tr>'
        for name, left, right, differs in fields_side_by_side(sample)
    )
    return (
        f'<p class="id">event id <code>{escape(str(sample.get("event_id", "")))}</code></p>'
        f"<table><tr><th>field</th><th>{escape(label_a)}</th><th>{escape(label_b)}</th></tr>"
        f"{rows}</table>"
    )


def render(diff: dict[str, Any], a: str, b: str, title: str = "") -> str:
    """The whole page; ``a`` and ``b`` name the versions (``orders@1``, ``orders@2``)."""
    heads = "".join(f"<th>{k}</th>" for k in ("equal", "changed", f"only in {a}", f"only in {b}"))
    counts = "".join(
        f"<tr><th>{escape(contract)}</th>"
        + "".join(f'<td class="n">{n.get(k, 0):,}</td>' for k in KINDS)
        + "</tr>"
        for contract, n in sorted(diff["counts"].items())
    )
    sections = []
    for contract, by_kind in sorted(diff["samples"].items()):
        for kind in KINDS[1:]:
            for sample in by_kind.get(kind, []):
                what = {"changed": "changed", "only_a": f"only in {a}", "only_b": f"only in {b}"}
                sections.append(
                    f"<h2>{escape(contract)} · {escape(what[kind])}</h2>"
                    + _sample_table(sample, a, b)
                )
    dead = (
        f"<p>dead letters: {diff.get('dead_letters_a', 0):,} from {escape(a)}, "
        f"{diff.get('dead_letters_b', 0):,} from {escape(b)}</p>"
    )
    name = escape(title or f"replay diff: {a} → {b}")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{name}</title>'
        f"<style>{STYLE}</style></head><body><h1>{name}</h1>"
        f"<p>Events pair up by event id (the same source change gives the same id in every "
        f"version). Highlighted rows are the fields that differ.</p>"
        f"<table><tr><th>contract</th>{heads}</tr>{counts}</table>{dead}"
        + ("".join(sections) or "<p>No event differs.</p>")
        + "</body></html>\n"
    )
