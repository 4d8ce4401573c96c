"""Rendering: the markdown and the PDF have the same pages, and pypdf reads back from each PDF
page the figures its markdown page has; the layout knows where every figure is."""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from tempering.tasks.finance.formats import fmt_value
from tempering.tasks.finance.layout import (extract_pages, layout, page_markdown, pdf_bytes, pdf_pages, render_pdf,
                                            tokens_estimate)
from tempering.tasks.finance.model import report
from tempering.tasks.finance.report import Spec

FIGURE = re.compile(r"\(?-?\$?\d[\d,]*(?:\.\d+)?\)?%?")


def figures(text: str) -> Counter:
    return Counter(FIGURE.findall(text))


@pytest.mark.parametrize("spec", [Spec(0, "brief"), Spec(1, "short"), Spec(2, "medium"), Spec(3, "medium", 4)],
                         ids=lambda s: f"{s.size}-{s.seed}-{s.tamper}")
def test_pypdf_reads_back_the_figures_of_each_markdown_page(spec):
    rep, lay, pages = report(spec), layout(spec), pdf_pages(spec)
    assert pdf_bytes(spec).startswith(b"%PDF") and len(pages) == lay.n_pages
    for n, text in enumerate(pages, start=1):
        assert set(text) <= set(string.printable)  # what the tools show spells in any tokenizer
        lines = text.splitlines()
        assert lines[0] == f"{rep.company} - Annual Report {rep.years[-1]}"
        assert lines[-1] == f"Page {n} of {lay.n_pages}"
        md = page_markdown(rep, lay, n)
        assert md.startswith(f"<!-- page {n} of {lay.n_pages} -->")
        assert figures("\n".join(lines[1:-1])) == figures(md.split("\n", 1)[1]), f"page {n}"
    # every figure of every table is on the page the layout says, as the tables print it
    for key, page in lay.where.items():
        row = rep.row(key)
        label = re.escape(row.label)
        value = re.escape(fmt_value(rep.cells[key], row.fmt))
        assert re.search(rf"^{label} .*(?<![\d,.(]){value}", pages[page - 1], re.M), (key, page)


def test_a_brief_report_is_two_pages_and_pdfs_are_reproducible():
    assert layout(Spec(0, "brief")).n_pages == 2
    rep, lay = report(Spec(1, "short")), layout(Spec(1, "short"))
    assert render_pdf(rep, lay) == render_pdf(rep, lay)
    # the markdown quotes the statements' figures in its tables
    md = "\n".join(page_markdown(rep, lay, n) for n in range(1, lay.n_pages + 1))
    assert f"| **Total assets** | {fmt_value(rep.cells[('bs', 'ta', str(rep.years[-1]))])} |" in md


def test_a_long_report_renders_as_a_pdf_of_100k_tokens():
    spec = Spec(11, "long")
    rep, lay = report(spec), layout(spec)
    pages = extract_pages(render_pdf(rep, lay))
    assert len(pages) == lay.n_pages and tokens_estimate("".join(pages)) >= 100_000
    # years beyond five columns are split into groups of columns on later pages
    last, first = str(rep.years[-1]), str(rep.years[0])
    assert lay.where[("bs", "ta", last)] < lay.where[("bs", "ta", first)]
