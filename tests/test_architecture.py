"""docs/architecture.md names every module, and the imports run the one way it says.

Imports are read with ``ast`` from every module, function-local and ``TYPE_CHECKING`` ones
included, so nothing hides an import from these checks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipelines", "realtime", "s2s_project")
DOC = ROOT / "docs" / "architecture.md"
NAMED = re.compile(r"`((?:pipelines|realtime|s2s_project)/[\w/]*\w\.py)`")


def holds_code(path: Path) -> bool:
    """Whether a file is a module worth naming: anything but a migration or an ``__init__`` with only a docstring."""
    if "migrations" in path.parts:
        return False
    body = ast.parse(path.read_text()).body
    return path.name != "__init__.py" or any(not _is_docstring(node) for node in body)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the project's packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if holds_code(path):
                parts = path.relative_to(ROOT).with_suffix("").parts
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """The absolute names a module imports (relative imports resolved against its package)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # ``from . import x`` / ``from .x import y``: against the package, one level up per dot
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def within(name: str, *prefixes: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


MODULES = modules()
# The protocol's own modules; the core and the transport interface sit above access, audit and node.
ABOVE = ("realtime.protocol.core", "realtime.protocol.transport")
PROTOCOL = tuple(n for n in MODULES if within(n, "realtime.protocol") and not within(n, *ABOVE))


def test_the_doc_names_every_module():
    files = {str(path.relative_to(ROOT)) for path in MODULES.values()}
    missing = files - set(NAMED.findall(DOC.read_text()))
    assert not missing, f"docs/architecture.md does not name: {sorted(missing)}"


def test_the_doc_names_no_module_that_does_not_exist():
    gone = {path for path in NAMED.findall(DOC.read_text()) if not (ROOT / path).is_file()}
    assert not gone, f"docs/architecture.md names modules that do not exist: {sorted(gone)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if within(n, "pipelines")))
def test_pipelines_import_nothing_of_django_or_the_app(name):
    wrong = {i for i in imports(name, MODULES[name]) if within(i, "django", "channels", "realtime", "s2s_project")}
    assert not wrong, f"{name} imports {sorted(wrong)}"


@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_the_protocol_below_the_core_imports_only_pipelines_and_itself(name):
    found = imports(name, MODULES[name])
    ours = {i for i in found if within(i, "realtime", "s2s_project")}
    wrong = {i for i in ours if not within(i, "realtime.protocol") or within(i, *ABOVE)}
    assert not wrong, f"{name} imports {sorted(wrong)}"


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if within(n, "realtime.access", "realtime.audit", "realtime.node"))
)
def test_access_audit_and_node_import_neither_a_transport_nor_the_core(name):
    wrong = {i for i in imports(name, MODULES[name]) if within(i, "realtime.transports", *ABOVE)}
    assert not wrong, f"{name} imports {sorted(wrong)}"


@pytest.mark.parametrize("name", ABOVE)
def test_the_core_and_the_transport_interface_import_no_transport(name):
    wrong = {i for i in imports(name, MODULES[name]) if within(i, "realtime.transports")}
    assert not wrong, f"{name} imports {sorted(wrong)}"


def test_the_import_reader_sees_local_relative_and_type_checking_imports():
    """The rules above rest on this reader: it must see every kind of import a module can hide."""
    conversation = imports("realtime.protocol.conversation", MODULES["realtime.protocol.conversation"])
    records = imports("realtime.audit.records", MODULES["realtime.audit.records"])
    llama = imports("pipelines.backends.llama_cpp_lm", MODULES["pipelines.backends.llama_cpp_lm"])
    assert "realtime.protocol.items" in conversation  # a plain import
    assert "realtime.protocol.conversation" in records  # under TYPE_CHECKING
    assert "pipelines.backends._decode" in llama and "llama_cpp" in llama  # relative, and inside a function
