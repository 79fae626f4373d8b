"""Issue 16: `replay --diff` also writes one static HTML report, counts and fields side by side."""

from __future__ import annotations

from html.parser import HTMLParser

from bizevents.diffreport import fields_side_by_side, render

DIFF = {
    "counts": {
        "store.orders.OrderStatusChanged": {"equal": 0, "changed": 2, "only_a": 0, "only_b": 1},
        "store.orders.OrderPlaced": {"equal": 7, "changed": 0, "only_a": 0, "only_b": 0},
    },
    "samples": {
        "store.orders.OrderStatusChanged": {
            "changed": [
                {
                    "event_id": "e-1",
                    "a": {"order_id": 5, "old_status": "PENDING", "new_status": "PENDING"},
                    "b": {"order_id": 5, "old_status": "PENDING", "new_status": "PAID"},
                }
            ],
            "only_b": [{"event_id": "e-2", "b": {"order_id": 6, "new_status": "<b>&"}}],
        }
    },
    "dead_letters_a": 0,
    "dead_letters_b": 1,
}


class _Cells(HTMLParser):
    """The text of each table row, and whether the page's tags nest properly."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self.stack: list[str] = []
        self.row_class = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("meta",):
            self.stack.append(tag)
        if tag == "tr":
            self.row_class = dict(attrs).get("class") or ""
            self.rows.append((self.row_class, []))
        elif tag in ("td", "th") and self.rows:
            self.rows[-1][1].append("")

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack.pop() == tag, (tag, self.stack)

    def handle_data(self, data: str) -> None:
        if self.rows and self.rows[-1][1] and ({"td", "th"} & set(self.stack)):
            self.rows[-1][1][-1] += data


def test_fields_side_by_side_flags_only_what_differs() -> None:
    rows = fields_side_by_side(DIFF["samples"]["store.orders.OrderStatusChanged"]["changed"][0])
    assert [(name, differs) for name, _, _, differs in rows] == [
        ("order_id", False),
        ("old_status", False),
        ("new_status", True),
    ]
    nested = fields_side_by_side({"a": {"x": {"y": 1, "z": 2}}, "b": {"x": {"y": 1, "z": 3}}})
    assert [(n, d) for n, _, _, d in nested] == [("x.y", False), ("x.z", True)]


def test_the_page_holds_the_counts_and_the_first_differences_field_by_field() -> None:
    page = render(DIFF, "orders@1", "orders@2")
    parser = _Cells()
    parser.feed(page)
    assert parser.stack == []  # every tag closed where it was opened
    rows: dict[str, tuple[str, list[str]]] = {}
    for cls, cells in parser.rows:
        if cells:
            rows.setdefault(cells[0], (cls, cells[1:]))  # the first sample's row of a field
    assert rows["store.orders.OrderStatusChanged"][1] == ["0", "2", "0", "1"]
    assert rows["store.orders.OrderPlaced"][1] == ["7", "0", "0", "0"]
    assert rows["new_status"] == ("differs", ['"PENDING"', '"PAID"'])
    assert rows["order_id"][0] == "same"
    assert "only in orders@2" in page and "dead letters: 0 from orders@1, 1 from orders@2" in page
    assert "<b>&" not in page and "&lt;b&gt;&amp;" in page  # event content is escaped
    assert "<script" not in page and "http" not in page.split("</style>")[0]  # one static file
