"""docs/configuration.md is the configuration reference, generated from the settings
classes themselves (every field, its environment variable, type and default, and the
comments beside it in the source), and this test fails when it is out of date.

Regenerate: ``.venv/bin/python tests/test_config_reference.py --write``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, get_origin

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
# (module, class, who reads it)
CLASSES = (
    ("sip_bridge.settings", "Settings", "`callshield bridge` (also `[bridge]` in `--config` TOML)"),
    ("detectors.bus.settings", "BusSettings", "every process: Redis, the outbox, retention"),
    ("detectors.model_store", "ModelSettings", "the bridge, `replay`, `models`, `eval`"),
    ("detectors.speaker.settings", "BiometricsSettings", "the bridge: speaker biometrics"),
    ("detectors.bus.evidence", "EvidenceSettings", "the bridge and the dashboard: evidence"),
    ("dashboard.settings", "DashboardSettings", "`callshield dashboard`"),
)
HEAD = """# Configuration reference

Every process reads its settings from `CALLSHIELD_*` environment variables (pydantic
settings; a `.env` file is not read); `callshield bridge` also takes a TOML file
(`--config`, a `[bridge]` table with the field names below) and command-line flags, in
the order defaults < file < environment < flags. Secrets (`SecretStr`) are never logged;
where a field says *secret spec*, it takes `file:/path` or `env:VAR` (a literal only for
development). This file is generated from the settings classes
(`.venv/bin/python tests/test_config_reference.py --write`) and a test keeps it current.
"""


def _comments(cls: type) -> dict[str, str]:
    """field -> the comment block above it and its inline comment, from the source."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse("".join(lines))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    out: dict[str, str] = {}
    for node in body.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        i = node.lineno - 1
        above: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            text = lines[j].strip().lstrip("#").strip()
            if not text.startswith("---"):
                above.insert(0, text)
            j -= 1
        end = (node.end_lineno or node.lineno) - 1
        inline = ""
        code = lines[end]
        if "#" in code and not code.rstrip().endswith(('"', "'")):
            inline = code.split("#", 1)[1].strip()
        text = " ".join(x for x in (" ".join(above), inline) if x)
        out[node.target.id] = text.replace("|", "\\|")
    return out


def _default(field: Any) -> str:
    if field.default_factory is not None:
        name = getattr(field.default_factory, "__name__", "")
        return "(computed)" if name.startswith("_") or name == "<lambda>" else f"`{name}()`"
    value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "value"):  # enums
        value = value.value
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _type(annotation: Any) -> str:
    plain = get_origin(annotation) is None and hasattr(annotation, "__name__")
    text = annotation.__name__ if plain else str(annotation)
    text = text.replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    return text.replace("|", "or")


def render() -> str:
    parts = [HEAD]
    for module, name, who in CLASSES:
        cls = getattr(importlib.import_module(module), name)
        prefix = cls.model_config.get("env_prefix", "")
        notes = _comments(cls)
        parts.append(f"\n## {name} (`{module}`)\n\nRead by {who}.\n")
        parts.append("| Environment variable | Type | Default | Notes |\n|---|---|---|---|")
        for field_name, field in cls.model_fields.items():
            env = f"{prefix}{field_name}".upper()
            alias = field.validation_alias
            if alias is not None and hasattr(alias, "choices"):
                env = " or ".join(str(c) for c in alias.choices)
            notes_text = notes.get(field_name, "")
            parts.append(
                f"| `{env}` | {_type(field.annotation)} | {_default(field)} | {notes_text} |"
            )
    return "\n".join(parts) + "\n"


def test_configuration_reference_is_current() -> None:
    assert DOC.exists(), "run: .venv/bin/python tests/test_config_reference.py --write"
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: .venv/bin/python tests/test_config_reference.py --write"
    )


def test_reference_names_every_bridge_setting() -> None:
    from sip_bridge.settings import Settings

    text = DOC.read_text()
    for field_name in Settings.model_fields:
        assert f"`CALLSHIELD_{field_name.upper()}`" in text


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        sys.path.insert(0, str(REPO))
        DOC.write_text(render())
        print(f"wrote {DOC}")
    else:
        print(render())
