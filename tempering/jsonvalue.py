"""`JSON`: the type of a value `json.loads` gives (or `json.dumps` takes), as one recursive alias.

Request bodies, tool-call arguments, metrics records and state files read back from disk are
JSON-shaped: annotating them `JSON` / `JSONObject` says what they are without claiming more (a
parsed body is still checked key by key where it is read). Nothing here parses or validates;
this module imports nothing from the package, so any layer may use it.
"""

from __future__ import annotations

from typing import Union

JSON = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
JSONObject = dict[str, JSON]  # a JSON object: a metrics record, a response body, a state file
