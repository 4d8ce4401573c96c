"""Financial documents: generated annual reports whose statements tie out, and questions about them.

`model` generates a company's report from a seed (`report` its types: blocks, tables, figures and
the identities between them; `company` the simulated company; `ledger` the figures as written;
`tables` the statements, segments and notes; `identities` how they tie out; `sections` the body and
its prose; `formats` how figures print; `tamper` the altered figure); `layout` lays it out in pages
and renders them as markdown and as a PDF (reportlab), read back with pypdf; `questions` asks and
judges (`conclusion` the written conclusions and their check, `numbers` reads figures in answers,
`calc` is the `calculate` tool's safe arithmetic);
`tools` is the per-episode document and its tools; `domain` registers the `finance/*` domains
(`DOMAINS`).
"""

from tempering.tasks.finance.domain import DOMAINS

__all__ = ["DOMAINS"]
