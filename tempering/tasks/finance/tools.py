"""The document an episode reads, and its tools.

`Document` (the per-episode host, `Domain.open_host`) is the report's PDF as pypdf reads it back,
page by page; it keeps which pages the episode read and how many calls read it; nothing else
changes. The tools: `list_pages` (the pages and what each holds), `read_page N` (a page's text),
`search QUERY` (the lines that contain the words, case-insensitive, with their pages) and
`calculate EXPRESSION` (arithmetic, `calc.evaluate`). The episode's answer is its last assistant
turn, one without a tool call (there is no submit tool).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tempering.tasks.host import Param, Tool, ToolError
from tempering.records import Budget, ExecResult
from tempering.tasks.finance.calc import CalcError, evaluate
from tempering.tasks.finance.layout import layout, pdf_pages
from tempering.tasks.finance.report import Spec

MAX_HITS = 20
MAX_QUERY = 200


@dataclass
class Document:
    spec: Spec
    pages: tuple[str, ...]
    contents: tuple[tuple[str, ...], ...]  # per page: its headings and table titles
    read: list[int] = field(default_factory=list)
    calls: int = 0

    def final_state(self) -> Document:
        """What the verifier judges: the document with the pages the episode read."""
        return self

    @classmethod
    def open(cls, spec: Spec) -> "Document":
        lay = layout(spec)
        return cls(spec, pdf_pages(spec), tuple(tuple(lay.titles(n)) for n in range(1, lay.n_pages + 1)))

    def page(self, number: str) -> str:
        try:
            n = int(number.strip().lstrip("#").removeprefix("page").strip())
        except ValueError:
            raise ToolError(f"read_page needs a page number, not {number!r}") from None
        if not 1 <= n <= len(self.pages):
            raise ToolError(f"there is no page {n}: the document has pages 1 to {len(self.pages)}")
        self.read.append(n)
        return self.pages[n - 1]

    def listing(self) -> str:
        lines = [f"{len(self.pages)} pages"]
        for n, titles in enumerate(self.contents, start=1):
            lines.append(f"{n}: {'; '.join(titles) if titles else '(text)'}")
        return "\n".join(lines)

    def search(self, query: str) -> str:
        words = query.split()
        if not words or len(query) > MAX_QUERY:
            raise ToolError(f"search needs a query of 1 to {MAX_QUERY} characters")
        pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
        hits = [(n, line.strip()) for n, text in enumerate(self.pages, start=1) for line in text.splitlines()
                if pattern.search(line)]
        if not hits:
            return f"no matches for {query!r}"
        shown = [f"page {n}: {re.sub(r' {3,}', '   ', line)}" for n, line in hits[:MAX_HITS]]
        more = len(hits) - MAX_HITS
        return "\n".join(shown + ([f"... and {more} more matches"] if more > 0 else []))


def _document(host: object) -> Document:
    if not isinstance(host, Document):
        raise ToolError("this tool reads a financial report, and this episode has none")
    host.calls += 1
    return host


def _list_pages(args: dict[str, str], host, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    return _document(host).listing(), None


def _read_page(args: dict[str, str], host, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    return _document(host).page(args["page"]), None


def _search(args: dict[str, str], host, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    return _document(host).search(args["query"]), None


def _calculate(args: dict[str, str], host, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    try:
        return evaluate(args["expression"]), None
    except CalcError as e:
        raise ToolError(str(e)) from None


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("list_pages", "List the report's pages and the sections and tables on each.", (), _list_pages),
    Tool("read_page", "Return the text of one page of the report.", (Param("page", "the page number, from 1"),),
         _read_page),
    Tool("search", "Find the lines of the report that contain a phrase (case-insensitive), with their pages.",
         (Param("query", "the words to look for"),), _search),
    Tool("calculate", "Evaluate an arithmetic expression: numbers, + - * / ** and parentheses.",
         (Param("expression", "for example (5314-5027)/5027*100"),), _calculate),
)}
