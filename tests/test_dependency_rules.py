"""DESIGN.md §1: CallShield's packages depend one way.

Every ``.py`` file under the packages is parsed with ``ast`` (never imported) and each
import is checked against ``RULES``. What counts as an import:

- ``import a.b`` and ``from a.b import c`` (as ``a.b.c``), anywhere in the file: inside
  functions and ``if TYPE_CHECKING:`` blocks too; relative imports are resolved against
  the file's own package;
- ``importlib.import_module("a.b")``, ``import_module(...)`` and ``__import__(...)`` with
  a string literal (an f-string counts by its literal prefix; a leading dot is resolved
  against ``package=`` or the file's package);
- string literals that name a CallShield module (``"sip_bridge.bench.cli"``, or
  ``"pkg.mod:attr"``) as dict values or list/tuple/set items: the lazy-loading tables the
  CLI uses (``sip_bridge/cli.py``'s ``_COMMANDS``). Bare top-level names (``"native"``) are
  only taken from import calls, where they cannot mean anything else.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

CALLSHIELD_PACKAGES = ("native", "detectors", "sip_bridge", "dashboard")


@dataclass(frozen=True, slots=True)
class Rule:
    """What one package may not import.

    ``forbidden`` and ``allowed`` hold dotted module prefixes (``"numpy"`` also covers
    ``numpy.typing``). ``allowed`` lists exceptions inside a forbidden prefix.
    """

    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()


# The one-way package rule, one row per top-level package. A new package needs a row
# (test_every_package_has_a_rule fails until it has one).
RULES: dict[str, Rule] = {
    # The media core in C is a leaf: no other CallShield package.
    "native": Rule(forbidden=("detectors", "sip_bridge", "dashboard")),
    # Analysis: windows in, scores and alerts out; knows nothing of SIP, transports or the
    # web process. It may use native (the frame contract lives there).
    "detectors": Rule(forbidden=("sip_bridge", "dashboard", "aiortc")),
    # The media process's composition root: wires native and detectors, not the web process.
    # One exception: the `callshield` CLI root (sip_bridge/cli.py) names the web process's
    # entry point, "dashboard.cli", in its lazy command table; that module imports nothing
    # of the dashboard until `callshield dashboard` runs.
    "sip_bridge": Rule(forbidden=("dashboard",), allowed=("dashboard.cli",)),
    # The web process: no media stack, no model runtime, no numpy (aiortc pulls av and
    # numpy in). From the media side it may import only the pure alert/event schema and
    # the Redis bus, both of which are held to the same diet by their own rows below.
    "dashboard": Rule(
        forbidden=("native", "detectors", "sip_bridge", "numpy", "onnxruntime", "av", "aiortc"),
        allowed=("detectors.alert_schema", "detectors.bus"),
    ),
    # Sub-package rows (the longest matching prefix applies). The Redis bus (publisher,
    # outbox, embedded Redis, webhook dispatcher) carries detector output to the media
    # process, the dashboard and `callshield webhooks`: no media or model stack, and from
    # the rest of detectors only the pure schema. It lives under detectors/ because the
    # top level is fixed and the dashboard may not import sip_bridge.
    "detectors.bus": Rule(
        forbidden=(
            *("native", "detectors", "sip_bridge", "dashboard"),
            *("numpy", "onnxruntime", "av", "aiortc"),
        ),
        allowed=("detectors.alert_schema", "detectors.bus"),
    ),
    "detectors.alert_schema": Rule(
        forbidden=(
            *("native", "detectors", "sip_bridge", "dashboard"),
            *("numpy", "onnxruntime", "av", "aiortc"),
        ),
    ),
}

_PKG_ALT = "|".join(CALLSHIELD_PACKAGES)
# A CallShield module path inside a string: dotted, or "pkg.mod:attr" / "pkg:attr".
_MODULE_STRING_RE = re.compile(
    rf"^(?P<module>(?:{_PKG_ALT})(?:\.[A-Za-z_]\w*)*)(?P<attr>:[A-Za-z_][\w.]*)?$"
)
_IMPORT_FUNCS = {"import_module", "__import__"}


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # absolute dotted name; "" when it could not be resolved
    line: int
    how: str  # "import", "from", "call", "string"
    error: str = ""  # set when the import itself is wrong (relative beyond top level)


@dataclass(frozen=True, slots=True)
class Violation:
    file: str
    line: int
    module: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.module or '?'}: {self.reason}"


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _resolve_relative(name: str, level: int, package: str) -> tuple[str, str]:
    """(absolute name, error) for a relative import ``level`` dots up from ``package``."""
    parts = package.split(".") if package else []
    if level > len(parts):
        return "", f"relative import {'.' * level}{name} goes beyond the top-level package"
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([name] if name else [])]), ""


def _call_func_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _literal_prefix(node: ast.expr) -> str | None:
    """A string literal, or the literal head of an f-string; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.rstrip(".")
    return None


def _module_strings(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Dict):
        yield from node.values
    elif isinstance(node, ast.List | ast.Tuple | ast.Set):
        yield from node.elts


def imports_in(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import found in ``source``, the text of module ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, "import") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base, error = node.module or "", ""
            if node.level:
                base, error = _resolve_relative(node.module or "", node.level, package)
            if error:
                found.append(Import("", node.lineno, "from", error))
                continue
            for alias in node.names:
                name = base if alias.name == "*" else f"{base}.{alias.name}".lstrip(".")
                found.append(Import(name, node.lineno, "from"))
        elif isinstance(node, ast.Call) and _call_func_name(node.func) in _IMPORT_FUNCS:
            target = _literal_prefix(node.args[0]) if node.args else None
            if not target:
                continue
            level = len(target) - len(target.lstrip("."))
            if level:
                anchor = package
                for kw in node.keywords:
                    if kw.arg == "package" and isinstance(kw.value, ast.Constant):
                        anchor = str(kw.value.value)
                name, error = _resolve_relative(target[level:], level, anchor)
                found.append(Import(name, node.lineno, "call", error))
            else:
                found.append(Import(target, node.lineno, "call"))
        else:
            for item in _module_strings(node):
                text = _literal_prefix(item) if isinstance(item, ast.Constant) else None
                match = _MODULE_STRING_RE.match(text) if text else None
                if match and ("." in match["module"] or match["attr"]):
                    found.append(Import(match["module"], item.lineno, "string"))
    return found


def check_source(
    source: str,
    module: str,
    is_package: bool = False,
    filename: str = "<string>",
    rules: Mapping[str, Rule] = RULES,
) -> list[Violation]:
    """The imports in ``source`` (module ``module``) that its package's rule forbids."""
    key = max((k for k in rules if _under(module, k)), key=len)
    rule = rules[key]
    violations: list[Violation] = []
    seen: set[tuple[str, int]] = set()
    for imp in imports_in(source, module, is_package):
        if imp.error:
            violations.append(Violation(filename, imp.line, imp.module, imp.error))
            continue
        if (imp.module, imp.line) in seen:
            continue
        seen.add((imp.module, imp.line))
        banned = next((p for p in rule.forbidden if _under(imp.module, p)), None)
        if banned is None or any(_under(imp.module, p) for p in rule.allowed):
            continue
        violations.append(
            Violation(
                filename,
                imp.line,
                imp.module,
                f"{module.split('.')[0]} must not import {banned} ({imp.how}; DESIGN.md §1)",
            )
        )
    return violations


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """Dotted module name of a file under ``root``, and whether it is a package's __init__."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def check_package(root: Path, package: str) -> tuple[int, list[Violation]]:
    """(files checked, violations) for every .py file under ``root/package``."""
    files = sorted((root / package).rglob("*.py"))
    violations: list[Violation] = []
    for path in files:
        name, is_package = module_name(path, root)
        rel = str(path.relative_to(root))
        try:
            source = path.read_text(encoding="utf-8")
            violations.extend(check_source(source, name, is_package, rel))
        except SyntaxError as exc:
            violations.append(Violation(rel, exc.lineno or 0, "", f"cannot parse: {exc.msg}"))
    return len(files), violations


# --- the repository follows the rules ---------------------------------------------------


@pytest.mark.parametrize("package", sorted(k for k in RULES if "." not in k))
def test_package_follows_dependency_rules(repo_root: Path, package: str) -> None:
    n_files, violations = check_package(repo_root, package)
    assert n_files > 0, f"{package}/ has no .py file: is the rules table out of date?"
    assert not violations, "forbidden imports:\n" + "\n".join(map(str, violations))


def test_every_package_has_a_rule(repo_root: Path) -> None:
    pyproject = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject.get("tool", {}).get("setuptools", {}).get("packages", [])
    if not isinstance(declared, list):  # packages.find: discovery, nothing declared
        declared = []
    on_disk = [p.parent.name for p in repo_root.glob("*/__init__.py")]
    top_level = {str(name).split(".")[0] for name in [*declared, *on_disk]} - {"tests"}
    missing = sorted(top_level - set(RULES))
    assert not missing, f"packages with no row in RULES (add one): {missing}"


# --- the checker itself can fail ----------------------------------------------------------

# (module, is_package, source, forbidden modules the checker must report)
CASES: list[tuple[str, bool, str, set[str]]] = [
    ("native.jb", False, "import detectors.windowing\n", {"detectors.windowing"}),
    ("native", True, "from sip_bridge import cli\n", {"sip_bridge.cli"}),
    ("native.jb", False, "import numpy as np\nfrom cffi import FFI\n", set()),
    ("detectors.vad", False, "from native import lib\nimport numpy\n", set()),
    ("detectors.vad", False, "from sip_bridge.rtp import parse\n", {"sip_bridge.rtp.parse"}),
    ("detectors.vad", False, "import dashboard\n", {"dashboard"}),
    ("sip_bridge.ingest", False, "import native\nfrom detectors import scheduler\n", set()),
    ("sip_bridge.ingest", False, "import dashboard.app\n", {"dashboard.app"}),
    ("dashboard.app", False, "import numpy as np\n", {"numpy"}),
    ("dashboard.app", False, "from numpy.typing import NDArray\n", {"numpy.typing.NDArray"}),
    ("dashboard.app", False, "from av import AudioFrame\n", {"av.AudioFrame"}),
    ("dashboard.app", False, "import onnxruntime\n", {"onnxruntime"}),
    ("dashboard.app", False, "import aiortc\n", {"aiortc"}),
    ("dashboard.app", False, "import numpyx\nimport avro\nfrom pydantic import BaseModel\n", set()),
    ("dashboard.app", False, "def f():\n    import native\n", {"native"}),
    (
        "dashboard.app",
        False,
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from sip_bridge.cli import main\n",
        {"sip_bridge.cli.main"},
    ),
    (
        "dashboard.app",
        False,
        "import importlib\nimportlib.import_module('sip_bridge.cli')\n",
        {"sip_bridge.cli"},
    ),
    (
        "dashboard.app",
        False,
        "from importlib import import_module\nimport_module('native')\n",
        {"native"},
    ),
    ("dashboard.app", False, "np = __import__('numpy')\n", {"numpy"}),
    (
        "dashboard.app",
        False,
        "import importlib\nimportlib.import_module(f'detectors.{x}')\n",
        {"detectors"},
    ),
    ("dashboard.app", False, "_VIEWS = {'live': 'detectors.scheduler'}\n", {"detectors.scheduler"}),
    ("dashboard.app", False, "PLUGINS = ['sip_bridge.cli:main']\n", {"sip_bridge.cli"}),
    ("dashboard.app", False, "LABELS = {'src': 'native', 'x': 'native code'}\n", set()),
    (
        "sip_bridge.cli",
        False,
        "_COMMANDS: dict[str, str] = {\n    'bench': 'sip_bridge.bench.cli',\n"
        "    'web': 'dashboard.app',\n}\n",
        {"dashboard.app"},
    ),
    ("dashboard.views", False, "from . import schema\nfrom .auth import login\n", set()),
    ("dashboard", True, "from .views import router\n", set()),
    (
        "sip_bridge.bench.cli",
        False,
        "import importlib\nimportlib.import_module('.jitter', package=__package__)\n",
        set(),
    ),
]


@pytest.mark.parametrize(
    ("module", "is_package", "source", "expected"),
    CASES,
    ids=[f"{c[0]}:{c[2].strip().splitlines()[-1].strip()[:40]}" for c in CASES],
)
def test_checker_reports_forbidden_imports(
    module: str, is_package: bool, source: str, expected: set[str]
) -> None:
    reported = {v.module for v in check_source(source, module, is_package)}
    assert reported == expected


def test_relative_import_beyond_top_level_is_reported() -> None:
    violations = check_source("from .. import native\n", "dashboard.views")
    assert len(violations) == 1
    assert "beyond the top-level package" in violations[0].reason


def test_allowed_exception_inside_forbidden_package() -> None:
    rules = {"dashboard": Rule(forbidden=("detectors",), allowed=("detectors.alert_schema",))}
    ok = "from detectors.alert_schema import Alert\nfrom detectors import alert_schema\n"
    assert check_source(ok, "dashboard.app", rules=rules) == []
    bad = check_source("from detectors import scheduler\n", "dashboard.app", rules=rules)
    assert [v.module for v in bad] == ["detectors.scheduler"]


def test_violation_names_file_line_and_rule(tmp_path: Path) -> None:
    (tmp_path / "dashboard").mkdir()
    (tmp_path / "dashboard" / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "dashboard" / "feed.py").write_text("import os\n\nimport numpy as np\n")
    n_files, violations = check_package(tmp_path, "dashboard")
    assert n_files == 2
    assert [str(v) for v in violations] == [
        "dashboard/feed.py:3: numpy: dashboard must not import numpy (import; DESIGN.md §1)"
    ]


def test_unparsable_file_is_a_violation(tmp_path: Path) -> None:
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / "broken.py").write_text("def (:\n")
    _, violations = check_package(tmp_path, "native")
    assert len(violations) == 1
    assert "cannot parse" in violations[0].reason


def test_sub_package_rows_apply_by_longest_prefix() -> None:
    """detectors may import numpy, but its bus sub-package may not (the dashboard
    imports the bus), and the schema module may not import the rest of detectors."""
    assert check_source("import numpy\n", "detectors.windowing") == []
    assert [v.module for v in check_source("import numpy\n", "detectors.bus.outbox")] == ["numpy"]
    bad = check_source("from detectors import windowing\n", "detectors.alert_schema")
    assert [v.module for v in bad] == ["detectors.windowing"]
