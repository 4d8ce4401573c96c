"""Financial documents: generated annual reports whose statements tie out, and questions about them.

`model` generates a company's report from a seed (statements, segments, notes, prose, and the
identities between its figures); `layout` lays it out in pages and renders them as markdown and
as a PDF (reportlab), read back with pypdf; `questions` asks and judges (`numbers` reads figures
in answers, `calc` is the `calculate` tool's safe arithmetic); `tools` is the per-episode
document and its tools; `domain` registers the `finance/*` domains (`DOMAINS`).
"""

from tempering.tasks.finance.domain import DOMAINS

__all__ = ["DOMAINS"]
