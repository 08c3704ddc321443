"""Wire objects as a newer writer of the same major version would send them: a later
minor ``schema_version`` and fields this reader does not know, at the top and nested."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

# nested objects of each kind that get an unknown field too
_NESTED = {"alert": ("reasons", 0), "score": ("quality",), "system": ("coverage",)}


def future(message: BaseModel, version: str = "1.4") -> dict[str, str]:
    """The stream entry's fields (``{kind, json}``) of ``message`` as version ``version``
    with unknown fields added."""
    body: dict[str, Any] = message.model_dump(mode="json")
    body["schema_version"] = version
    body["added_later"] = {"confidence_interval": [0.1, 0.9], "note": "a 1.4 field"}
    path = _NESTED.get(body["kind"], ())
    node: Any = body
    for step in path:
        node = node[step] if node is not None else None
    if isinstance(node, dict):
        node["added_later_too"] = 7
    return {"kind": body["kind"], "json": json.dumps(body)}
