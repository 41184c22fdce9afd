"""A measured prefill profile (``profile:FILE``, shadow/sim/cost/profile.py): loading the bundled
H200 table, exactness at its points, the interpolation and extrapolation rules against values
computed by hand, monotonicity, and every refusal (one line naming the file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.cost.profile import MONOTONE_TOLERANCE, load_profile, parse_profile_arg

H200 = str(Path(__file__).resolve().parents[2] / "shadow" / "data" / "h200_prefill.jsonl")
MODELS = ("llama3_8b", "qwen25_7b")


def _write(tmp_path, rows, name: str = "p.jsonl") -> str:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(p)


def _pt(c, n, s, **kw):
    return {"cached": c, "new": n, "s": s, **kw}


def _h200_points(model: str) -> dict[tuple[int, int], float]:
    out = {}
    for line in Path(H200).read_text().splitlines():
        d = json.loads(line)
        if d.get("model") == model and "s" in d:
            out[(d["cached"], d["new"])] = d["s"]
    return out


# ---- the bundled table ----

@pytest.mark.parametrize("model", MODELS)
def test_h200_loads_and_is_exact_at_every_point(model):
    p = load_profile(H200, model)
    want = _h200_points(model)
    assert len(want) == 34 and p.n_points == 34
    assert p.points() == want
    c = np.array([k[0] for k in want])
    n = np.array([k[1] for k in want])
    got = p.seconds(c, n)
    assert got.tolist() == list(want.values())          # exactly, not approximately
    for (ci, ni), s in want.items():
        assert float(p.seconds(ci, ni)) == s


def test_h200_without_a_model_names_both():
    with pytest.raises(ShadowError) as e:
        load_profile(H200)
    msg = str(e.value)
    assert "llama3_8b" in msg and "qwen25_7b" in msg and "model=NAME" in msg and "\n" not in msg


def test_unknown_model_names_the_ones_there():
    with pytest.raises(ShadowError, match=r"no point of model 'gpt'.*llama3_8b, qwen25_7b"):
        load_profile(H200, "gpt")


@pytest.mark.parametrize("model", MODELS)
def test_h200_fit_is_the_relative_least_squares_of_the_three_term_form(model):
    p = load_profile(H200, model)
    pts = _h200_points(model)
    c = np.array([k[0] for k in pts], dtype=float)
    n = np.array([k[1] for k in pts], dtype=float)
    s = np.array(list(pts.values()))
    a, b, d = p.coef
    assert a > 0 and b > 0 and d > 0
    X = np.stack([np.ones_like(n), n, n * (c + n / 2)], axis=1) / s[:, None]
    coef, *_ = np.linalg.lstsq(X, np.ones_like(s), rcond=None)   # unconstrained: all > 0 here
    assert p.coef == pytest.approx(tuple(coef), rel=1e-9)
    rel = (X @ coef - 1)
    assert 0.10 < float(np.sqrt((rel ** 2).mean())) < 0.16        # the 13-15% of the notes


# ---- interpolation and extrapolation, by hand ----

TABLE = [_pt(0, 100, 1.0), _pt(0, 200, 2.0), _pt(0, 400, 3.0),
         _pt(1000, 100, 1.5), _pt(1000, 400, 4.5)]


def test_within_a_row_and_between_rows(tmp_path):
    p = load_profile(_write(tmp_path, TABLE))
    assert float(p.seconds(0, 150)) == pytest.approx(1.5)
    assert float(p.seconds(0, 300)) == pytest.approx(2.5)
    assert float(p.seconds(1000, 250)) == pytest.approx(3.0)
    # between the rows: linear in c between the two rows' values at n
    assert float(p.seconds(250, 300)) == pytest.approx(0.75 * 2.5 + 0.25 * 3.5)
    assert float(p.seconds(500, 100)) == pytest.approx(1.25)


def test_a_falling_last_segment_continues_flat_then_curves(tmp_path):
    p = load_profile(_write(tmp_path, [_pt(0, 100, 1.0), _pt(0, 200, 2.0), _pt(0, 400, 1.9)]))
    d = p.coef[2]
    assert float(p.seconds(0, 600)) == pytest.approx(1.9 + 200 * (0.0 + d * 200 / 2))


def test_past_the_edges_the_fitted_form_continues_the_table(tmp_path):
    p = load_profile(_write(tmp_path, TABLE))
    a, b, d = p.coef

    def F(c, n):
        return a + b * n + d * n * (c + n / 2)

    # beyond a row's largest n: its last slope (1/200 and 3/300 s per token) and F's curvature
    assert float(p.seconds(0, 900)) == pytest.approx(3.0 + 500 * (1 / 200 + d * 500 / 2))
    assert float(p.seconds(1000, 900)) == pytest.approx(4.5 + 500 * (3 / 300 + d * 500 / 2))
    # below its smallest n: held; beyond the largest cached row: F's step in c
    assert float(p.seconds(1000, 20)) == 1.5 and float(p.seconds(0, 1)) == 1.0
    assert float(p.seconds(3000, 250)) == pytest.approx(3.0 + F(3000, 250) - F(1000, 250))
    assert float(p.seconds(3000, 900)) == pytest.approx(4.5 + 500 * (3 / 300 + d * 500 / 2)
                                                        + F(3000, 900) - F(1000, 900))
    # continuous at every edge
    for c, n, dc, dn in ((0, 400, 0, 1e-6), (1000, 100, 0, -1e-6), (1000, 250, 1e-6, 0),
                         (1000, 400, 1e-6, 1e-6)):
        assert float(p.seconds(c + dc, n + dn)) == pytest.approx(float(p.seconds(c, n)),
                                                                 abs=1e-6)


def test_a_single_point_row_is_the_fitted_form_through_it(tmp_path):
    # NOTE: past a one-point row's n, F's slope there and F's curvature: F's own step
    p = load_profile(_write(tmp_path, [_pt(0, 100, 1.0), _pt(0, 400, 3.0), _pt(800, 200, 2.5)]))
    a, b, d = p.coef
    F = (lambda c, n: a + b * n + d * n * (c + n / 2))
    assert float(p.seconds(800, 200)) == 2.5
    assert float(p.seconds(800, 300)) == pytest.approx(2.5 + F(800, 300) - F(800, 200))
    assert float(p.seconds(800, 100)) == 2.5


def test_scalars_and_arrays_broadcast(tmp_path):
    p = load_profile(_write(tmp_path, TABLE))
    assert p.seconds(0, 150).shape == ()
    assert p.seconds(np.array([0, 1000]), 100).tolist() == [1.0, 1.5]
    assert p.seconds([[0], [1000]], [100, 400]).shape == (2, 2)


# ---- monotone ----

def _grid_steps(p, cmax, nmax):
    C = np.linspace(0, cmax, 181)
    N = np.linspace(1, nmax, 181)
    T = p.seconds(C[:, None], N[None, :])
    return C, N, T


def test_monotone_in_both_arguments_where_the_table_is(tmp_path):
    rng = np.random.default_rng(3)
    for _ in range(20):
        cs = np.concatenate([[0], np.sort(rng.choice(np.arange(512, 20000, 512),
                                                     size=rng.integers(0, 4), replace=False))])
        rows, base = [], 0.0
        for c in cs:
            base += rng.uniform(0, 0.05)
            ns = np.sort(rng.choice(np.arange(16, 16000, 16), size=rng.integers(1, 6),
                                    replace=False))
            s = base + np.cumsum(rng.uniform(0.001, 0.2, size=len(ns)))
            rows += [_pt(int(c), int(n), float(v)) for n, v in zip(ns, s)]
        # NOTE: each row starts above the one before at its first n, and climbs at least as fast:
        # the rows are ordered at every n only if checked; keep tables whose rows are ordered
        if len(rows) < 2:
            continue
        path = _write(tmp_path, rows)
        p = load_profile(path)
        pts = p.points()
        ordered = all(float(p._row(lo, np.array([n], dtype=float))[0])
                      <= float(p._row(hi, np.array([n], dtype=float))[0])
                      for lo, hi in zip(p.rows, p.rows[1:]) for n in np.linspace(1, 30000, 300))
        C, N, T = _grid_steps(p, 30000, 30000)
        assert (np.diff(T, axis=1) >= -1e-12).all()      # in n: every row here is monotone
        if ordered:
            assert (np.diff(T, axis=0) >= -1e-12).all()  # in c
        assert all(float(p.seconds(c, n)) == s for (c, n), s in pts.items())


@pytest.mark.parametrize("model", MODELS)
def test_h200_decreases_only_where_its_points_decrease(model):
    """Every decrease of t on a grid lies in a cell whose measured points decrease: in n,
    llama3_8b's cached-0 row between 512 and 1,024 new tokens (blended into the cells next to
    it in c); in c, the rows whose value at n is below the row before it."""
    p = load_profile(H200, model)
    rc = [r.cached for r in p.rows]
    C = np.linspace(0, 40000, 201)
    N = np.linspace(1, 40000, 201)
    T = p.seconds(C[:, None], N[None, :])
    dn = np.argwhere(np.diff(T, axis=1) < -1e-12)
    for i, j in dn:
        c = C[i]
        rows = [r for r in p.rows if r.cached <= c][-1:] + [r for r in p.rows if r.cached > c][:1]
        assert any(np.any(np.diff(r.s[(r.new >= N[j] - 512) & (r.new <= N[j + 1] + 512)]) < 0)
                   for r in rows), (c, N[j])
    if model == "qwen25_7b":
        assert dn.shape[0] == 0
    dc = np.argwhere(np.diff(T, axis=0) < -1e-12)
    for i, j in dc:
        k = np.searchsorted(rc, C[i], side="right") - 1
        assert k < len(rc) - 1, (C[i], N[j])        # never past the last row (d >= 0)
        lo, hi = p.rows[k], p.rows[k + 1]
        at = np.array([N[j]], dtype=float)
        assert p._row(hi, at)[0] < p._row(lo, at)[0]


# ---- bad input: one line, file and line ----

def _bad(tmp_path, rows, match, model=None):
    path = _write(tmp_path, rows)
    with pytest.raises(ShadowError) as e:
        load_profile(path, model)
    msg = str(e.value)
    assert "\n" not in msg and path in msg, msg
    import re
    assert re.search(match, msg), msg
    return msg


#: (the file's lines, what its one-line refusal says); the commands' refusals run the same rows
#: (tests/sim/test_profile_run.py)
BAD_PROFILES = [
    ([], r"has 0 points"),
    ([{"env": True}], r"has 0 points"),
    ([_pt(0, 100, 1.0)], r"has 1 point;"),
    ([_pt(0, 100, 1.0), _pt(0, 200, 1.0)][:1] + ["", _pt(0, 100, 1.0)], r"has 1 point;"),
    ([_pt(0, 100, 1.0), _pt(0, 200, -2.0)], r":2: s is -2.0, not a finite"),
    ([_pt(0, 100, 1.0), '{"cached": 0, "new": 200, "s": NaN}'], r":2: s is NaN"),
    ([_pt(0, 100, 1.0), '{"cached": 0, "new": 200, "s": Infinity}'], r":2: s is Infinity"),
    ([_pt(0, 100, 1.0), _pt(0, 200, 0)], r":2: s is 0, not a finite number of seconds > 0"),
    ([_pt(0, 100, 1.0), _pt(0, 200, "1")], r":2: s is \"1\""),
    ([_pt(0, 100, 1.0), _pt(0, 0, 1.0)], r":2: new is 0, not an integer >= 1"),
    ([_pt(0, 100, 1.0), _pt(-1, 100, 1.0)], r":2: cached is -1, not an integer >= 0"),
    ([_pt(0, 100, 1.0), _pt(1.5, 100, 1.0)], r":2: cached is 1.5"),
    ([_pt(0, 100, 1.0), _pt(True, 100, 1.0)], r":2: cached is true"),
    ([_pt(0, 100, 1.0), "{nope"], r":2: not JSON"),
    ([_pt(0, 100, 1.0), "[1, 2]"], r":2: not a JSON object"),
    ([_pt(0, 100, 1.0), {"cached": 0, "new": 100}], r":2: a point needs cached, new and s; "
                                                     r"this line has no s"),
    ([_pt(0, 100, 1.0), _pt(0, 200, 2.0), _pt(0, 100, 1.5)],
     r":3: the point cached 0, new 100 is already at line 1 with other seconds"),
    ([_pt(0, 100, 1.0), _pt(0, 200, 2.0), _pt(0, 400, 0.5)],
     r":3: not monotone in new tokens: cached 0, new 400 takes 0.5 s, less than 2 s for new 200 "
     r"\(line 2\) by more than 0.25 of the row's fastest point and beyond both points' repeats"),
    ([_pt(0, 100, 1.0), _pt(0, 200, 2.0, min_s=1.9, max_s=2.1),
      _pt(0, 400, 1.5, min_s=1.4, max_s=1.6)], r":3: not monotone in new tokens"),
    ([_pt(0, 100, 1.0, model="a"), _pt(0, 200, 2.0)], r"several models \(a, \(no model key\)\)"),
    ([_pt(512, 100, 1.0), _pt(512, 200, 2.0)], r"no point at cached 0"),
]


@pytest.mark.parametrize("rows, match", BAD_PROFILES)
def test_bad_profiles(tmp_path, rows, match):
    _bad(tmp_path, rows, match)


def test_duplicates_that_agree_are_one_point(tmp_path):
    p = load_profile(_write(tmp_path, [_pt(0, 100, 1.0), _pt(0, 200, 2.0), _pt(0, 100, 1.0)]))
    assert p.n_points == 2


def test_a_fall_within_both_points_repeats_is_kept(tmp_path):
    """A fall beyond the tolerance whose points' repeats overlap (noise that grows with the time,
    as on a shared CPU) is kept; without the spread, or with spreads apart, it is refused."""
    rows = [_pt(0, 100, 0.01), _pt(0, 3104, 0.1087, min_s=0.0970, max_s=0.1395),
            _pt(0, 3200, 0.1032, min_s=0.0976, max_s=0.1062)]
    p = load_profile(_write(tmp_path, rows))
    assert float(p.seconds(0, 3200)) == 0.1032
    _bad(tmp_path, [{k: v for k, v in r.items() if k not in ("min_s", "max_s")} for r in rows],
         r":3: not monotone")
    # a spread that is not a number, or does not hold s, counts as none
    _bad(tmp_path, [rows[0], dict(rows[1], min_s="x"), rows[2]], r":3: not monotone")
    _bad(tmp_path, [rows[0], dict(rows[1], max_s=0.1), rows[2]], r":3: not monotone")


def test_a_dip_within_the_tolerance_is_kept(tmp_path):
    fastest = 1.0
    dip = 2.0 - MONOTONE_TOLERANCE * fastest * 0.99
    p = load_profile(_write(tmp_path, [_pt(0, 100, fastest), _pt(0, 200, 2.0),
                                       _pt(0, 400, dip)]))
    assert float(p.seconds(0, 400)) == dip
    _bad(tmp_path, [_pt(0, 100, fastest), _pt(0, 200, 2.0),
                    _pt(0, 400, 2.0 - MONOTONE_TOLERANCE * fastest * 1.01)], r":3: not monotone")


def test_the_h200_table_with_a_row_reversed_or_columns_swapped(tmp_path):
    lines = Path(H200).read_text().splitlines()
    pts = [json.loads(x) for x in lines]
    # llama3_8b's cached-0 row in reverse order of seconds
    row = [d for d in pts if d.get("model") == "llama3_8b" and d.get("cached") == 0]
    rev = [dict(d, s=r["s"]) for d, r in zip(row, reversed(row))]
    msg = _bad(tmp_path, rev, r"not monotone in new tokens", model="llama3_8b")
    assert ":2: " in msg     # the second point already falls far below the first
    # cached and new swapped: the cached-0 row becomes new 0
    swapped = [dict(d, cached=d["new"], new=d["cached"]) if "s" in d else d for d in pts]
    _bad(tmp_path, swapped, r":3: new is 0, not an integer >= 1", model="llama3_8b")


def test_unreadable_file(tmp_path):
    with pytest.raises(ShadowError, match=r"profile:.*nope\.jsonl: cannot read it"):
        load_profile(str(tmp_path / "nope.jsonl"))
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b'{"cached": 0, "new": 1, "s": 1}\n\xff\xfe\n')
    with pytest.raises(ShadowError, match=r"bin\.jsonl: byte 32: not UTF-8"):
        load_profile(str(p))


@pytest.mark.parametrize("arg, want", [
    ("f.jsonl", ("f.jsonl", None)),
    ("f.jsonl,model=llama3_8b", ("f.jsonl", "llama3_8b")),
    ("f.jsonl, model = x ", ("f.jsonl", "x")),
])
def test_parse_arg(arg, want):
    assert parse_profile_arg(arg) == want


@pytest.mark.parametrize("arg, match", [
    ("", r"needs a file name"),
    (",model=x", r"needs a file name"),
    ("f,block=16", r"unknown parameter 'block=16'"),
    ("f,x", r"unknown parameter 'x'"),
    ("f,model=a,model=b", r"model given twice"),
    ("f,model=", r"model= needs a value"),
])
def test_parse_arg_refusals(arg, match):
    with pytest.raises(ShadowError, match=match):
        parse_profile_arg(arg)
