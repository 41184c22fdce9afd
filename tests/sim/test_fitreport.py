"""One reader of replay's report.json (shadow/sim/cost/report.py) behind ``--cost-model
fit:REPORT`` and ``--service fit:REPORT``: the same bad report is the same one-line error from
both, naming the option and the file; each use then checks the terms it needs."""

from __future__ import annotations

import json

import pytest

from shadow.sim.cost.models import parse_cost_model
from shadow.sim.timing.service import parse_service
from tests.sim._json_files import UNREADABLE, one_line_error, put


@pytest.mark.parametrize("name,content,words", [
    *UNREADABLE,
    ("nofit.json", json.dumps({"prefill_model": None, "block_size": 16}),
     "the report has no fitted prefill model (too few measured requests)"),
    ("nocoef.json", json.dumps({"prefill_model": {"coef": []}, "block_size": 16}),
     "the report has no fitted prefill model"),
    ("text.json", json.dumps({"prefill_model": {"coef": [0.01, "x"]}, "block_size": 16}),
     "the prefill model's coef [0.01, 'x'] is not a list of numbers"),
    ("bool.json", json.dumps({"prefill_model": {"coef": [0.01, True]}, "block_size": 16}),
     "is not a list of numbers"),
    ("negative.json", json.dumps({"prefill_model": {"coef": [0.01, -1e-4, 1e-9]},
                                  "block_size": 16}),
     "the fitted prefill model has a negative or non-finite term (a=0.01 s, b=-0.0001 s/token, "
     "d=1e-09 s/token^2): refit it with more requests"),
    ("nan.json", '{"prefill_model": {"coef": [0.01, 1e-4, NaN]}, "block_size": 16}',
     "has a negative or non-finite term"),
])
def test_both_readers_refuse_a_bad_report_alike(tmp_path, name, content, words):
    path = put(tmp_path / name, content)
    cost = one_line_error(lambda: parse_cost_model(f"fit:{path}"))
    svc = one_line_error(lambda: parse_service(f"fit:{path}"))
    assert cost.startswith(f"cost model fit:{path}: ") and words in cost, cost
    assert svc.startswith(f"--service fit:{path}: ") and words in svc, svc
    assert cost.split(f"fit:{path}: ", 1)[1] == svc.split(f"fit:{path}: ", 1)[1]


def test_each_use_checks_the_terms_it_needs(tmp_path):
    """A block's cost reads b and d only (a least-squares ``a`` may be negative); a request's
    prefill time reads a too, and needs b > 0 (its speed is 1/b)."""
    neg_a = tmp_path / "neg_a.json"
    neg_a.write_text(json.dumps({"prefill_model": {"coef": [-0.002, 1e-4, 1e-9]},
                                 "block_size": 16}))
    assert parse_cost_model(f"fit:{neg_a}").cost(0) > 0
    assert "has a negative or non-finite term (a=-0.002 s" in one_line_error(
        lambda: parse_service(f"fit:{neg_a}"))
    one_term = tmp_path / "one_term.json"
    one_term.write_text(json.dumps({"prefill_model": {"coef": [0.02]}, "block_size": 16}))
    assert parse_cost_model(f"fit:{one_term}").costs(2).tolist() == [0.0, 0.0]
    assert "the fitted prefill model has no per-token term (a=0.02 s, b=0 s/token" in one_line_error(
        lambda: parse_service(f"fit:{one_term}"))
