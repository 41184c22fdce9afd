"""docs/design.md's import tables hold for the code: every import of every module of the rooms
(``shadow/``, ``replay/``, ``deploy/``), read from its source (``ast`` for ``.py``; the ``import``
and ``cimport`` lines of ``.pyx`` and ``.pxd``), is one the tables allow.

The tables are read from docs/design.md (the one place they are written): the rooms' table
(``| room | holds | may import |``) and the table of ``shadow/sim/``'s wings (``| wing | holds |
may import |``).  A "may import" cell is a list: dotted room names (`` `shadow.trace` ``), wing or
top-module names (``core``, ``registry``, ``policies/_shared``), packages beyond the standard
library (``numpy``; ``ray (lazily)``: only inside a function), ``nothing``; after a ``;``,
``never X`` names what must not be imported.  Other parenthesised words are notes.  Every room
may import the shared modules at ``shadow/``'s top.  Beside the tables: compiled code never
imports a reference, and nothing outside ``shadow/connector/`` imports vLLM.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
#: where the rooms' code lives (tests/ and bench/ are not rooms)
CODE_DIRS = ("shadow", "replay", "deploy")
SIM = "shadow.sim"
SHARED = "shared"

_CELL_NOTE = re.compile(r"\((?!lazily\))[^)]*\)")
_PYX_IMPORT = re.compile(r"^(\s*)(?:from\s+([\w.]+)\s+c?import\b|c?import\s+([\w.]+(?:\s*,\s*[\w.]+)*))")


@dataclass
class Allowed:
    """One row's "may import" cell."""

    names: set[str] = field(default_factory=set)       # rooms, wings, top modules
    packages: set[str] = field(default_factory=set)    # beyond the standard library, anywhere
    lazily: set[str] = field(default_factory=set)      # packages only inside a function
    never: set[str] = field(default_factory=set)


def parse_cell(cell: str, *, wing: bool = False) -> Allowed:
    """A "may import" cell as :class:`Allowed`; a word this grammar does not know is an error.
    In a wing's cell every name is one of ``shadow/sim``'s (a wing or a top module)."""
    text = _CELL_NOTE.sub("", cell.replace("**", "").replace("`", ""))
    allowed = Allowed()
    for i, clause in enumerate(text.split(";")):
        clause = clause.strip()
        if not clause:
            continue
        never = clause.startswith("never ")
        if i and not never:
            raise ValueError(f"a clause after ';' must start with 'never': {cell!r}")
        for item in clause.removeprefix("never ").split(","):
            item = item.strip()
            lazy = item.endswith("(lazily)")
            name = item.removesuffix("(lazily)").strip()
            if name == "nothing" and not never:
                continue
            if not re.fullmatch(r"[A-Za-z_][\w./]*", name):
                raise ValueError(f"cannot read {item!r} in the cell {cell!r}")
            name = name.replace("/", ".")
            if never:
                allowed.never.add(name.lower())
            elif wing or name.split(".")[0] in ("shadow", "replay"):
                allowed.names.add(name)
            else:
                (allowed.lazily if lazy else allowed.packages).add(name.lower())
    return allowed


def read_tables(text: str) -> tuple[dict[str, Allowed], dict[str, Allowed]]:
    """(rooms, wings) from docs/design.md: ``{'shadow.trace': Allowed, 'replay': ..., 'shared':
    ...}`` and ``{'core': Allowed, 'policies': ..., ...}``."""
    rooms: dict[str, Allowed] = {}
    wings: dict[str, Allowed] = {}
    table = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            table = None
            continue
        if cells[:1] == ["room"] and cells[-1] == "may import":
            table = rooms
            continue
        if cells[:1] == ["wing"] and cells[-1] == "may import":
            table = wings
            continue
        if table is None or set(cells[0]) <= set("-: "):
            continue
        path = cells[0].strip("`").split()[0].strip("`").rstrip("/")
        if table is wings:
            key = path.removeprefix("shadow/sim/")
        else:
            key = SHARED if path == "shadow" else path.replace("/", ".")
        table[key] = cells[-1]
    return ({k: parse_cell(v) for k, v in rooms.items()},
            {k: parse_cell(v, wing=True) for k, v in wings.items()})


@dataclass(frozen=True)
class Import:
    module: str     # the dotted name imported (for ``from X import Y``: X.Y when that is a module)
    lazy: bool      # inside a function
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str, root: Path) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.is_dir() or any(base.with_suffix(s).is_file() for s in (".py", ".pyx", ".pxd"))


def _resolve(module: str, names: list[str], root: Path) -> list[str]:
    subs = [f"{module}.{n}" for n in names if _is_module(f"{module}.{n}", root)]
    return subs or [module]


def read_imports(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import of a module: ``ast`` for ``.py``; for ``.pyx``/``.pxd`` the ``import``,
    ``cimport`` and ``from ... (c)import`` lines (an indented one counts as lazy)."""
    out: list[Import] = []
    if path.suffix == ".py":
        tree = ast.parse(path.read_text(), str(path))
        package = module_name(path, root)
        if path.name != "__init__.py":
            package = package.rpartition(".")[0]

        def visit(node: ast.AST, lazy: bool) -> None:
            for child in ast.iter_child_nodes(node):
                # NOTE: under `if TYPE_CHECKING:` an import never runs; it counts as lazy
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
                    isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"))
                if isinstance(child, ast.Import):
                    out.extend(Import(a.name, lazy, child.lineno) for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    mod = child.module or ""
                    if child.level:
                        base = package.split(".")[:len(package.split(".")) - child.level + 1]
                        mod = ".".join(base + ([mod] if mod else []))
                    for m in _resolve(mod, [a.name for a in child.names], root):
                        out.append(Import(m, lazy, child.lineno))
                visit(child, inner)

        visit(tree, False)
        return out
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _PYX_IMPORT.match(line)
        if not m:
            continue
        lazy = bool(m.group(1))
        if m.group(2):
            names = re.findall(r"[\w.]+", line.split("import", 1)[1].split("#")[0])
            out.extend(Import(x, lazy, i) for x in _resolve(m.group(2), names, root))
        else:
            out.extend(Import(x.strip(), lazy, i) for x in m.group(3).split(","))
    return out


def code_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (root / d).rglob("*")
                  if p.suffix in (".py", ".pyx", ".pxd") and ".venv" not in p.parts)


def room_of(module: str, rooms: dict[str, Allowed]) -> str | None:
    """The room holding ``module``: the longest room name it lies in; ``shadow``'s own modules
    are the shared room."""
    best = max((r for r in rooms if r != SHARED and (module == r or module.startswith(r + "."))),
               key=len, default=None)
    if best is None and (module == "shadow" or module.count(".") == 1 and module.startswith("shadow.")):
        return SHARED
    return best


def wing_of(module: str, wings: dict[str, Allowed]) -> str | None:
    rest = module.removeprefix(SIM + ".")
    if rest == module:
        return None
    return max((w for w in wings if rest == w or rest.startswith(w + ".")), key=len, default=None)


def _third_party(module: str) -> str | None:
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in ("__future__", "shadow", "replay", "libc", "cpython",
                                                 "cython", "libcpp"):
        return None
    return top.lower()


def violations(root: Path = ROOT, design: Path | None = None) -> list[str]:
    """Every import of the rooms' code that docs/design.md's tables (or the two rules beside
    them) do not allow, as ``file:line: importer imports module (why)``."""
    rooms, wings = read_tables((design or root / "docs" / "design.md").read_text())
    out = []
    for path in code_files(root):
        me = module_name(path, root)
        rel = path.relative_to(root)
        room = room_of(me, rooms)
        if room is None:
            out.append(f"{rel}: in no room of docs/design.md's table")
            continue
        wing = wing_of(me, wings)
        if me.startswith(SIM + ".") and me.count(".") > 2 and wing is None and \
                (root / "shadow" / "sim" / me.split(".")[2]).is_dir():
            out.append(f"{rel}: in no wing of docs/design.md's table")
        for imp in read_imports(path, root):
            where = f"{rel}:{imp.line}: {me} imports {imp.module}"
            top = _third_party(imp.module)
            if top == "vllm" and room != "shadow.connector":
                out.append(f"{where} (nothing outside shadow/connector imports vLLM)")
                continue
            if path.suffix in (".pyx", ".pxd") and \
                    (imp.module + ".").startswith(SIM + ".reference."):
                out.append(f"{where} (compiled code never imports a reference)")
                continue
            allowed = rooms[room]
            if top is not None:
                if top in allowed.never or top not in allowed.packages | allowed.lazily:
                    out.append(f"{where} ({room} may not import {top})")
                elif top in allowed.lazily and top not in allowed.packages and not imp.lazy:
                    out.append(f"{where} ({room} imports {top} only inside a function)")
                continue
            other = room_of(imp.module, rooms)
            if other is None:
                if _is_module(imp.module, root):
                    out.append(f"{where} (a module in no room)")
                continue
            if room == SHARED and other != SHARED:
                out.append(f"{where} (the shared modules import no room)")
                continue
            if other != room and other != SHARED and other not in allowed.names:
                out.append(f"{where} ({room} may not import {other})")
                continue
            if wing is not None and imp.module.startswith(SIM + "."):
                target = wing_of(imp.module, wings)
                rest = imp.module.removeprefix(SIM + ".").split(".")[0]
                if target == wing:
                    continue
                w = wings[wing]
                ok_names = {n for n in w.names if n not in w.never}
                hit = any(imp.module == f"{SIM}.{n}" or imp.module.startswith(f"{SIM}.{n}.")
                          for n in ok_names)
                if not hit:
                    out.append(f"{where} (the wing {wing} may not import "
                               f"{target or rest})")
    return out


def test_the_tables_are_read():
    rooms, wings = read_tables(DESIGN.read_text())
    assert {SHARED, "shadow.trace", "shadow.sim", "shadow.connector", "shadow.sweep", "replay",
            "deploy"} <= set(rooms)
    assert {"core", "policies", "reference"} <= set(wings)
    assert "vllm" in rooms["shadow.connector"].packages
    assert "ray" in rooms["shadow.sweep"].lazily and "ray" not in rooms["shadow.sweep"].packages


def test_every_import_is_one_the_design_allows():
    found = violations()
    assert not found, "\n".join(found)


@pytest.mark.parametrize("cell,names,packages,lazily,never", [
    ("numpy, `shadow.trace`; **never vLLM**", {"shadow.trace"}, {"numpy"}, set(), {"vllm"}),
    ("`shadow.sim`, ray (lazily), vLLM (only here)", {"shadow.sim"}, {"vllm"}, {"ray"}, set()),
    ("nothing", set(), set(), set(), set()),
])
def test_a_cell_is_read_by_its_grammar(cell, names, packages, lazily, never):
    a = parse_cell(cell)
    assert (a.names, a.packages, a.lazily, a.never) == (names, packages, lazily, never)


@pytest.mark.parametrize("cell", ["the metric names", "numpy; ray", "`shadow.sim` + numpy"])
def test_a_cell_outside_the_grammar_is_refused(cell):
    with pytest.raises(ValueError):
        parse_cell(cell)


def test_a_forbidden_import_is_found(tmp_path):
    """The checker itself: a tree with one import of each kind the design forbids."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text(DESIGN.read_text())
    files = {
        "shadow/__init__.py": "",
        "shadow/errors.py": "",
        "shadow/cli_options.py": "from shadow.sim.category import X\n",
        "shadow/trace/__init__.py": "import orjson\n",
        "shadow/sim/__init__.py": "",
        "shadow/sim/category.py": "",
        "shadow/sim/registry.py": "",
        "shadow/sim/core/__init__.py": "",
        "shadow/sim/reference/__init__.py": "",
        "shadow/sim/reference/lru.py": "",
        "shadow/sim/policies/__init__.py": "",
        "shadow/sim/policies/recency/lru.pyx": "from shadow.sim.reference.lru import check\n",
        "shadow/sweep/__init__.py": "import ray\n",
        "shadow/connector/__init__.py": "import vllm\n",
        "shadow/connector/recorder.py": "",
        "replay/__init__.py": "from shadow.connector.recorder import x\nimport vllm\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert any("shadow/cli_options.py:1" in v and "shared modules import no room" in v
               for v in found), found
    assert any("lru.pyx:1" in v and "never imports a reference" in v for v in found), found
    assert any("replay/__init__.py:1" in v and "replay may not import shadow.connector" in v
               for v in found), found
    assert any("replay/__init__.py:2" in v and "outside shadow/connector" in v for v in found)
    assert any("shadow/sweep/__init__.py:1" in v and "only inside a function" in v
               for v in found), found
    assert not any("shadow/connector/__init__.py" in v or "shadow/trace" in v for v in found)
