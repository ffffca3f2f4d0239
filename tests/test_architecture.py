"""docs/architecture.md names every module, and the imports run the one way it says.

Imports are read with ``ast`` from every module, function-local and ``TYPE_CHECKING`` ones
included, so nothing hides an import from these checks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TypeGuard

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

# The layers, lowest first: a module imports only from its own layer or a lower one (Python's own packages and
# third-party ones aside). Within ``realtime``, what is not named here is wiring at the top (views, admin,
# management commands, the app config), as is ``s2s_project`` but for its Celery app, which the node layer uses.
LAYERS = (
    ("pipelines",),
    ("realtime.protocol",),
    (
        "realtime.models",
        "realtime.auth_models",
        "realtime.prompt_models",
        "realtime.recording_models",
        "realtime.supervision_models",
    ),
    ("realtime.tasks", "s2s_project.celery"),
    ("realtime.access", "realtime.audit"),
    ("realtime.node",),
    ("realtime.live",),
    ("realtime.transports",),
    ("realtime", "s2s_project"),
)
PROTOCOL = tuple(n for n in MODULES if within(n, "realtime.protocol"))


def layer(name: str) -> int | None:
    """The layer of one of our modules (None: not ours), by the longest prefix that names it."""
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if within(name, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank)
    return None if best is None else best[1]


def test_the_doc_names_every_module():
    files = {str(path.relative_to(ROOT)) for path in MODULES.values()}
    missing = files - set(NAMED.findall(DOC.read_text()))
    assert not missing, f"docs/architecture.md does not name: {sorted(missing)}"


def test_the_doc_names_no_module_that_does_not_exist():
    gone = {path for path in NAMED.findall(DOC.read_text()) if not (ROOT / path).is_file()}
    assert not gone, f"docs/architecture.md names modules that do not exist: {sorted(gone)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_runs_back_up(name):
    own = layer(name)
    found = imports(name, MODULES[name]) - {"realtime", "s2s_project"}  # ``from realtime import x``: x is checked
    wrong = {i for i in found if (rank := layer(i)) is not None and rank > own}
    assert not wrong, f"{name} (layer {LAYERS[own]}) imports from above it: {sorted(wrong)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if within(n, "pipelines")))
def test_pipelines_import_nothing_of_django_or_the_app(name):
    wrong = {i for i in imports(name, MODULES[name]) if within(i, "django", "channels", "realtime", "s2s_project")}
    assert not wrong, f"{name} imports {sorted(wrong)}"


@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_the_protocol_is_pure(name):
    """The wire format and the session's state: no ORM, no settings, no channel layer, nothing above it."""
    found = imports(name, MODULES[name])
    ours = {i for i in found if within(i, "django", "channels", "s2s_project", "realtime")}
    wrong = {i for i in ours if not within(i, "realtime.protocol")}
    assert not wrong, f"{name} imports {sorted(wrong)}"


def test_the_layers_rule_catches_an_import_that_runs_back_up():
    """The layer test rests on this: a protocol module importing the live core would be refused."""
    assert layer("realtime.protocol.conversation") < layer("realtime.live.core") < layer("realtime.transports.sip")
    assert layer("realtime.access.owner") < layer("realtime.live.core")
    assert layer("s2s_project.celery") < layer("realtime.node.cluster") < layer("realtime.server.launcher")


def test_the_import_reader_sees_local_relative_and_type_checking_imports():
    """The rules above rest on this reader: it must see every kind of import a module can hide."""
    conversation = imports("realtime.protocol.conversation", MODULES["realtime.protocol.conversation"])
    records = imports("realtime.audit.records", MODULES["realtime.audit.records"])
    llama = imports("pipelines.backends.llama_cpp_lm", MODULES["pipelines.backends.llama_cpp_lm"])
    assert "realtime.protocol.items" in conversation  # a plain import
    assert "realtime.protocol.conversation" in records  # under TYPE_CHECKING
    assert "pipelines.backends._llama_tools" in llama and "llama_cpp" in llama  # relative, and inside a function


# Which project module each imports, by the reader above: function-local and ``TYPE_CHECKING`` imports count.
GRAPH = {name: {i for i in imports(name, path) if i in MODULES and i != name} for name, path in MODULES.items()}

# Circles that are being broken elsewhere, named so that no new one joins them unseen: each entry is one circle's
# modules, exactly. Remove an entry when its circle is gone (the test below says so).
KNOWN_CIRCLES: set[frozenset[str]] = set()


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The modules that import each other, directly or through others: each strongly connected component of
    two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def test_no_two_modules_import_each_other_directly_or_through_others():
    """A local or ``TYPE_CHECKING`` import that only breaks a circle is a responsibility in the wrong module."""
    new = circles(GRAPH) - KNOWN_CIRCLES
    assert not new, "import circles: " + "; ".join(" <-> ".join(sorted(circle)) for circle in new)


def package(name: str) -> str | None:
    """The package a module belongs to for the circle check: ``realtime.live``, ``pipelines.backends``; a module
    directly in ``realtime`` or ``pipelines`` (``realtime.models``, ``pipelines.pool``) is its own. None for the
    wiring at the top (``s2s_project``, the views, the admin, the server, the commands), which nothing imports."""
    if layer(name) in (None, len(LAYERS) - 1):
        return None
    return ".".join(name.split(".")[:2])


def test_no_two_packages_import_each_other_through_any_of_their_modules():
    """As for modules, per package: ``access`` importing ``node`` while ``node`` imports ``access`` hid a circle
    between the packages that no module showed (issue 54)."""
    packages: dict[str, set[str]] = {}
    for name, imported in GRAPH.items():
        if (own := package(name)) is not None:
            packages.setdefault(own, set()).update(p for other in imported if (p := package(other)) is not None)
    for name, imported in packages.items():
        imported.discard(name)
    found = circles(packages)
    assert not found, "package circles: " + "; ".join(" <-> ".join(sorted(circle)) for circle in found)


def test_the_known_circles_are_still_there():
    gone = KNOWN_CIRCLES - circles(GRAPH)
    assert not gone, f"no longer circles, remove them from KNOWN_CIRCLES: {sorted(map(sorted, gone))}"


def test_the_circle_finder_sees_a_circle_through_a_third_module_and_none_in_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()


@pytest.mark.parametrize(("carrier", "other"), [("webrtc", "sip"), ("sip", "webrtc")])
def test_the_call_transports_import_nothing_of_each_other(carrier, other):
    """What WebRTC and SIP share lives beside them in ``realtime/transports/`` (``calls``, ``playout``)."""
    mine = (n for n in MODULES if within(n, f"realtime.transports.{carrier}"))
    wrong = {f"{n} -> {i}" for n in mine for i in imports(n, MODULES[n]) if within(i, f"realtime.transports.{other}")}
    assert not wrong, sorted(wrong)


# llama-cpp-python's private attributes: a ``Llama``'s (``_ctx``, ``_batch``, ``_input_ids``, ``_model``...) and
# those of the wrappers they hold. Only the adapter reaches them, so that a version of the library that moves
# them is one file's work.
LLAMA_PRIVATE = frozenset(
    {"_ctx", "_batch", "_input_ids", "_model", "_n_ctx", "_n_tokens", "_scores", "_candidates", "_sampler", "_stack"}
)
LLAMA_ADAPTER = "pipelines.backends._llama_adapter"


def private_llama_reads(path: Path) -> set[str]:
    """``name._attribute`` for each of ``LLAMA_PRIVATE`` read on anything but ``self`` (a module's own state)."""
    return {
        f"{ast.unparse(node.value)}.{node.attr}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in LLAMA_PRIVATE
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    }


@pytest.mark.parametrize("name", sorted(n for n in MODULES if within(n, "pipelines") and n != LLAMA_ADAPTER))
def test_only_the_adapter_touches_llama_cpp_python_internals(name):
    found = private_llama_reads(MODULES[name])
    assert not found, f"{name} reads {sorted(found)}: ask pipelines/backends/_llama_adapter.py instead"


def test_the_internals_check_sees_the_adapter_reach_them():
    """The test above rests on this: the reads it looks for are the ones the adapter makes."""
    assert {"context._input_ids", "context._ctx", "context._batch", "context._model"} <= private_llama_reads(
        MODULES[LLAMA_ADAPTER]
    )


# --- the "where to make a change" table ----------------------------------------------------------------------------

WHERE_TO = re.compile(r"`([\w/.]+\.py)` \(`([\w.]+)`")


def where_to_rows() -> list[tuple[str, str]]:
    """(what to change, where to start) of each row of docs/architecture.md's table."""
    section = DOC.read_text().split("## Where to make a change", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("to change", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def defines(path: Path, name: str) -> bool:
    """Whether ``path`` defines ``name`` (a function, a class, a method or an assignment; ``Class.method``)."""
    text = path.read_text()
    return all(
        re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(part)}\b|^\s*{re.escape(part)}\s*[:=]", text, re.M)
        for part in name.split(".")
    )


def test_each_row_of_the_where_to_table_names_a_file_and_a_name_in_it_that_exist():
    rows = where_to_rows()
    assert len(rows) >= 25
    for change, start in rows:
        named = WHERE_TO.findall(start)
        assert named, f"'{change}': name a file and the symbol to change in it: `path.py` (`name`)"
        for file, name in named:
            path = ROOT / file
            assert path.is_file(), f"'{change}': {file} does not exist"
            assert defines(path, name), f"'{change}': {file} does not define {name}"
        for file in re.findall(r"`([\w/.]+\.py)`", start):
            assert (ROOT / file).is_file(), f"'{change}': {file} does not exist"


def test_the_where_to_check_sees_a_moved_name():
    assert defines(ROOT / "realtime" / "access" / "owner.py", "Owner.may_reach")
    assert not defines(ROOT / "realtime" / "access" / "owner.py", "Owner.no_such_rule")


# --- the live session's mixins --------------------------------------------------------------------------------------

LIVE = ROOT / "realtime" / "live"


def is_self_attribute(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def private_names(source: str) -> tuple[set[str], set[str], set[str]]:
    """(used, defined, set in ``__init__`` alone) of one module's private ``self._x`` names.

    Defined: a method of one of its classes (not a ``TYPE_CHECKING`` stub, which only declares what another
    mixin offers), a class attribute with a value, or an attribute the module assigns in any method but an
    ``__init__``. Set in ``__init__``: assigned there and nowhere else in the module. A bare annotation
    (``_x: float``) is a declaration and neither."""
    tree = ast.parse(source)
    defined: set[str] = set()
    in_init: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                defined.add(item.target.id)
            elif isinstance(item, ast.Assign):
                defined.update(target.id for target in item.targets if isinstance(target, ast.Name))
        for method in (item for item in cls.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(method):
                if is_self_attribute(node) and isinstance(node.ctx, ast.Store):
                    (in_init if method.name == "__init__" else defined).add(node.attr)
    used = {node.attr for node in ast.walk(tree) if is_self_attribute(node)}

    def private(names: set[str]) -> set[str]:
        return {name for name in names if name.startswith("_") and not name.startswith("__")}

    return private(used), private(defined), private(in_init) - defined


def cross_module_privates(sources: dict[str, str]) -> set[str]:
    """``module: self._x (other module)`` for each private name a module uses but does not define, where another
    module of the package defines it: a mixin reaching into another's private methods or state."""
    names = {module: private_names(source) for module, source in sources.items()}
    found = set()
    for module, (used, defined, in_init) in names.items():
        for name in sorted(used - defined - in_init):
            owners = sorted(other for other, (_, theirs, _) in names.items() if other != module and name in theirs)
            if owners:
                found.add(f"{module}: self.{name} ({', '.join(owners)})")
    return found


def test_no_mixin_of_the_live_session_calls_a_private_method_of_another_module():
    """``SessionCore``'s mixins (guards, handlers, supervision, followers...) each hold their own concern: what one
    offers the others is public, named for what it does (``send``, ``spawn``, ``schedule_timers``), and declared
    under ``TYPE_CHECKING`` by the mixin that uses it; its private methods and the state it changes stay in its
    own module.

    One thing is allowed, as the code does it: plain data that ``SessionCore.__init__`` sets and nothing else in
    its module changes (``_session_started``, ``_followers``' first empty dict), declared with a bare annotation
    by the mixin that keeps it. The mixin's own methods then change it; the core does not."""
    sources = {path.stem: path.read_text() for path in sorted(LIVE.glob("*.py"))}
    found = cross_module_privates(sources)
    assert not found, "private names used across realtime/live's modules: " + "; ".join(sorted(found))


def test_the_mixin_check_sees_a_private_call_across_modules_and_allows_data_set_in_init():
    """The test above rests on this: a call of another module's private method is seen, a ``TYPE_CHECKING``
    stub does not hide it, and data another module only sets in ``__init__`` passes."""
    offers = "class A:\n    def _helper(self): ...\n    def __init__(self):\n        self._started = 0\n"
    uses = (
        "class B:\n    _started: float\n"
        "    if TYPE_CHECKING:\n        def _helper(self): ...\n"
        "    def run(self):\n        return self._helper(), self._started\n"
    )
    assert cross_module_privates({"a": offers, "b": uses}) == {"b: self._helper (a)"}
    changes = (
        "class C:\n    def __init__(self):\n        self._started = 0\n    def tick(self):\n        self._started = 1\n"
    )
    assert cross_module_privates({"c": changes, "b": uses}) == {"b: self._started (c)"}  # changed after __init__
