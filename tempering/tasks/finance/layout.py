"""Pages: the report laid out once, then rendered as markdown and as a PDF with the same pages.

`layout(spec)` paginates the report's blocks (headings, prose, tables) into pages of at most
`LINES` lines: prose is wrapped with the PDF font's own metrics (reportlab's `simpleSplit`), a
table wider than `_WIDTH` characters is split into groups of year columns, a table that does not
fit what is left of a page (8 rows at least) continues on the next one under its repeated header.
Both renderers draw exactly these pages, so page N of the markdown and of the PDF hold the same
figures, and where each figure is shown (`Layout.where`) is known without rendering anything.

The PDF (`pdf_bytes`) draws tables in Courier, one line per row (pypdf reads each row back as one
line, its columns aligned by spaces), and prose in Helvetica. `pdf_pages` is the text of each page
as pypdf extracts it: what the tools show.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from tempering.tasks.finance.formats import fmt_value
from tempering.tasks.finance.model import memo, report
from tempering.tasks.finance.report import Block, Contents, Heading, Key, PageBreak, Para, Report, Row, Spec, Table

LINES = 54  # body lines per page, 12 points each
_WIDTH = 106  # characters of a Courier 8-point line across the text width
_VALUE = 13  # characters of a value column
_TEXT_WIDTH = 512.0  # points
_PROSE = ("Helvetica", 9.0)


@dataclass(frozen=True)
class PHeading:
    text: str
    level: int


@dataclass(frozen=True)
class PPara:
    lines: tuple[str, ...]  # as wrapped for the PDF


@dataclass(frozen=True)
class PTable:
    table: Table
    columns: tuple[tuple[str, str], ...]
    rows: tuple[Row, ...]
    continued: bool
    label_width: int


@dataclass(frozen=True)
class PContents:
    entries: tuple[tuple[str, int], ...]  # (section, page)


Placed = PHeading | PPara | PTable | PContents


@dataclass(frozen=True)
class Layout:
    pages: tuple[tuple[Placed, ...], ...]
    where: dict[Key, int]  # figure -> the (first) page that shows it, 1-based

    @property
    def n_pages(self) -> int:
        return len(self.pages)

    def titles(self, page: int) -> list[str]:
        """What page `page` (1-based) holds: its headings and table titles."""
        out = []
        for item in self.pages[page - 1]:
            if isinstance(item, PHeading) and item.level > 0:
                out.append(item.text)
            elif isinstance(item, PTable):
                out.append(item.table.title + (" (continued)" if item.continued else ""))
        return out


def _height(item: Placed) -> int:
    if isinstance(item, PHeading):
        return {0: 3, 1: 2, 2: 2}[item.level]
    if isinstance(item, PPara):
        return len(item.lines) + 1
    if isinstance(item, PTable):
        return 3 + len(item.rows) + 1  # title, caption, header, rows, a gap
    return len(item.entries) + 1


def _wrap(text: str) -> tuple[str, ...]:
    from reportlab.lib.utils import simpleSplit

    return tuple(simpleSplit(text, _PROSE[0], _PROSE[1], _TEXT_WIDTH))


def _column_groups(table: Table) -> tuple[int, list[tuple[tuple[str, str], ...]]]:
    label = max(len(r.label) for r in table.rows) + 2
    per = max(1, (_WIDTH - label) // _VALUE)
    cols = table.columns
    if len(cols) <= per:
        return label, [cols]
    k = -(-len(cols) // -(-len(cols) // per))  # as even as possible
    return label, [cols[i:i + k] for i in range(0, len(cols), k)]


def paginate(rep: Report) -> Layout:
    pages: list[list[Placed]] = [[]]
    used = 0

    def new_page() -> None:
        nonlocal used
        if pages[-1]:
            pages.append([])
        used = 0

    def place(item: Placed) -> None:
        nonlocal used
        pages[-1].append(item)
        used += _height(item)

    blocks: list[Block] = list(rep.body)
    sections = [b.text for b in blocks if isinstance(b, Heading) and b.level == 1]
    for i, block in enumerate(blocks):
        if isinstance(block, PageBreak):
            new_page()
        elif isinstance(block, Contents):
            place(PContents(tuple((s, 0) for s in sections)))
        elif isinstance(block, Heading):
            if used + _height(PHeading(block.text, block.level)) + 4 > LINES:  # keep with what follows
                new_page()
            place(PHeading(block.text, block.level))
        elif isinstance(block, Para):
            lines = _wrap(block.text)
            while lines:
                room = LINES - used - 1
                if room < min(2, len(lines)):
                    new_page()
                    continue
                place(PPara(lines[:room]))
                lines = lines[room:]
        elif isinstance(block, Table):
            label, groups = _column_groups(block)
            for g, cols in enumerate(groups):
                rows = [r for r in block.rows if r.style == "head" or any((block.key, r.key, c) in rep.cells
                                                                         for c, _ in cols)]
                first = True
                while rows:
                    whole = PTable(block, cols, tuple(rows), not first or g > 0, label)
                    if used + _height(whole) <= LINES:
                        place(whole)
                        break
                    room = LINES - used - 4
                    if room < 8:  # too little left of this page to start (or go on with) the table
                        new_page()
                        continue
                    place(PTable(block, cols, tuple(rows[:room]), not first or g > 0, label))
                    rows = rows[room:]
                    first = False
                    new_page()
    # the contents' page numbers, and where each figure is
    starts = {}
    where: dict[Key, int] = {}
    for n, page in enumerate(pages, start=1):
        for item in page:
            if isinstance(item, PHeading) and item.level == 1:
                starts.setdefault(item.text, n)
            elif isinstance(item, PTable):
                for row in item.rows:
                    for col, _ in item.columns:
                        key = (item.table.key, row.key, col)
                        if key in rep.cells:
                            where.setdefault(key, n)
    done = [tuple(PContents(tuple((s, starts[s]) for s in sections)) if isinstance(x, PContents) else x for x in page)
            for page in pages]
    return Layout(tuple(done), where)


@memo(16)
def layout(spec: Spec) -> Layout:
    return paginate(report(spec))


# ---------------------------------------------------------------------------------------------
# The text of a table row, shared by both renderers


def _cells(rep: Report, item: PTable, row: Row) -> list[str]:
    if row.style == "head":
        return ["" for _ in item.columns]
    return [fmt_value(rep.cells.get((item.table.key, row.key, c)), row.fmt) for c, _ in item.columns]


def _mono_row(label: str, values: list[str], width: int) -> str:
    return (label.ljust(width) + "".join(v.rjust(_VALUE) for v in values)).rstrip()


def _title(item: PTable) -> str:
    return item.table.title + (" (continued)" if item.continued else "")


# ---------------------------------------------------------------------------------------------
# Markdown


def page_markdown(rep: Report, lay: Layout, n: int) -> str:
    out = [f"<!-- page {n} of {lay.n_pages} -->"]
    for item in lay.pages[n - 1]:
        if isinstance(item, PHeading):
            out.append("#" * (item.level + 1) + " " + item.text)
        elif isinstance(item, PPara):
            out.append(" ".join(item.lines))
        elif isinstance(item, PContents):
            out.append("\n".join(f"- {s} ... page {p}" for s, p in item.entries))
        elif isinstance(item, PTable):
            lines = [f"**{_title(item)}**", "", f"*{item.table.caption}*", "",
                     "| | " + " | ".join(h for _, h in item.columns) + " |",
                     "|---|" + "---:|" * len(item.columns)]
            for row in item.rows:
                label = f"**{row.label}**" if row.style in ("sub", "total") else row.label
                lines.append(f"| {label} | " + " | ".join(_cells(rep, item, row)) + " |")
            out.append("\n".join(lines))
    return "\n\n".join(out)


def markdown(spec: Spec) -> str:
    """The whole report as markdown, page by page (pages marked `<!-- page N of M -->`)."""
    rep, lay = report(spec), layout(spec)
    return "\n\n".join(page_markdown(rep, lay, n) for n in range(1, lay.n_pages + 1)) + "\n"


# ---------------------------------------------------------------------------------------------
# PDF


def render_pdf(rep: Report, lay: Layout) -> bytes:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    pdf = canvas.Canvas(buf, pagesize=letter, invariant=1, pageCompression=1)
    pdf.setTitle(f"{rep.company} Annual Report {rep.years[-1]}")
    width, height = letter
    left, top, lead = 50.0, height - 50.0, 12.0
    header = f"{rep.company} - Annual Report {rep.years[-1]}"
    for n, page in enumerate(lay.pages, start=1):
        pdf.setFont("Helvetica", 7)
        pdf.drawString(left, height - 30, header)
        y = top - lead

        for item in page:
            if isinstance(item, PHeading):
                size = {0: 18, 1: 13, 2: 10.5}[item.level]
                pdf.setFont("Helvetica-Bold", size)
                pdf.drawString(left, y - (lead if item.level == 0 else 0), item.text)
                y -= lead * _height(item)
            elif isinstance(item, PPara):
                pdf.setFont(*_PROSE)
                for line in item.lines:
                    pdf.drawString(left, y, line)
                    y -= lead
                y -= lead
            elif isinstance(item, PContents):
                pdf.setFont(*_PROSE)
                for s, p in item.entries:
                    pdf.drawString(left, y, f"{s} ... page {p}")
                    y -= lead
                y -= lead
            elif isinstance(item, PTable):
                pdf.setFont("Helvetica-Bold", 9)
                pdf.drawString(left, y, _title(item))
                y -= lead
                pdf.setFont("Helvetica-Oblique", 8)
                pdf.drawString(left, y, item.table.caption)
                y -= lead
                pdf.setFont("Courier-Bold", 8)
                pdf.drawString(left, y, _mono_row("", [h for _, h in item.columns], item.label_width))
                y -= lead
                for row in item.rows:
                    pdf.setFont("Courier-Bold" if row.style in ("sub", "total", "head") else "Courier", 8)
                    pdf.drawString(left, y, _mono_row(row.label, _cells(rep, item, row), item.label_width))
                    y -= lead
                y -= lead
        pdf.setFont("Helvetica", 7)
        pdf.drawCentredString(width / 2, 30, f"Page {n} of {lay.n_pages}")
        pdf.showPage()
    pdf.save()
    return buf.getvalue()


@memo(8)
def pdf_bytes(spec: Spec) -> bytes:
    return render_pdf(report(spec), layout(spec))


def extract_pages(data: bytes) -> tuple[str, ...]:
    from pypdf import PdfReader

    return tuple(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


@memo(16)
def pdf_pages(spec: Spec) -> tuple[str, ...]:
    """The text of each page of the report's PDF, as pypdf reads it back: what the tools show."""
    return extract_pages(pdf_bytes(spec))


def tokens_estimate(text: str) -> int:
    """A rough count of tokens: about 4 characters each."""
    return len(text) // 4
