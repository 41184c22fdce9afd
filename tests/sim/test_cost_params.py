import pytest

from shadow.errors import ShadowError
from shadow.sim.cost.models import parse_cost_model
from shadow.sim.params import parse_params
from shadow.sim.registry import PolicyNotBuilt, make_policy, POLICIES


@pytest.mark.parametrize("text,p,want", [
    ("uniform", 5, 1.0), ("position", 0, 1.0), ("position", 9, 10.0),
    ("qwen3coder30b_blksz_16", 0, 865.0), ("qwen3coder30b_blksz_16", 10, 885.0),
    ("qwen3coder30b_blksz_64", 2, 3536.0), ("linear:3,0.5", 4, 5.0),
])
def test_cost_models(text, p, want):
    m = parse_cost_model(text)
    assert m.cost(p) == want
    assert m.costs(p + 1)[p] == want


def test_table_cost_model(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("10\n20\n30.5\n")
    m = parse_cost_model(f"table:{f}")
    assert list(m.costs(5)) == [10, 20, 30.5, 30.5, 30.5]
    assert list(m.int_costs(5)) == [10, 20, 31, 31, 31]      # llround: half away from zero


@pytest.mark.parametrize("text,msg", [
    ("nope", "unknown cost model"), ("linear:1", "expected linear:A,B"),
    ("linear:a,1", "not a number"), ("table:", "needs a file"),
    ("table:/nonexistent/x", "cannot read"),
])
def test_bad_cost_models(text, msg):
    with pytest.raises(ShadowError, match=msg):
        parse_cost_model(text)


def test_bad_table_line_names_file_and_line(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("1\nx\n")
    with pytest.raises(ShadowError, match=r"c.txt:2: 'x' is not a number"):
        parse_cost_model(f"table:{f}")


def test_params():
    d = "small-size-ratio=0.10,move-to-main-threshold=2,mode=drain,flag=false"
    assert parse_params("", d) == {"small-size-ratio": 0.1, "move-to-main-threshold": 2,
                                   "mode": "drain", "flag": False}
    got = parse_params("move-to-main-threshold=3, mode=micro,flag=true", d)
    assert (got["move-to-main-threshold"], got["mode"], got["flag"]) == (3, "micro", True)
    with pytest.raises(ShadowError, match="unknown parameter 'x'"):
        parse_params("x=1", d)
    with pytest.raises(ShadowError, match="expected int"):
        parse_params("move-to-main-threshold=0.5", d)
    with pytest.raises(ShadowError, match="expected key=value"):
        parse_params("oops", d)


def test_not_built_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(POLICIES, "lru", "shadow.sim.policies.does_not_exist")
    with pytest.raises(PolicyNotBuilt, match="not built yet"):
        make_policy("lru", 8)
