"""``attnio bound --eps E --entry-bound B``: the bounds on eps-approximate attention beside the
exact ones (issue 36), each refusal one line naming the flag."""

from __future__ import annotations

import json
import math

import pytest

from attnio.approx.features import feature_dim
from attnio.approx.poly import polynomial
from attnio.bounds import approximate as ab
from attnio.cli import main


def test_bound_eps_lists_the_approximate_bounds(capsys):
    assert main(["bound", "--N", "65536", "--d", "8", "--M", "20000", "--eps", "1e-3",
                 "--entry-bound", "0.6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [b["name"] for b in out["approximate_bounds"]]
    assert names == ["approx_w_stationary", "alman_song_degree", "seth_entry_threshold"]
    # the feature count of the least degree reaching eps on R = B^2 d / sqrt(d)
    R = 0.6 ** 2 * 8 / math.sqrt(8)
    r = feature_dim(8, polynomial(1e-3, R).degree)
    want = ab.approx_w_stationary(N=65536, Nkv=65536, d=8, M=20000, r=r).value
    assert out["approximate_bounds"][0]["value"] == want
    assert out["bounds"] and out["best"] == "pv_segment"  # the exact ones are still there


def test_bound_without_eps_has_no_approximate_bounds(capsys):
    assert main(["bound", "--N", "256", "--d", "8", "--M", "2000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["approximate_bounds"] is None


@pytest.mark.parametrize("extra,flag", [
    (["--eps", "1e-3"], "--eps needs --entry-bound"),
    (["--entry-bound", "0.5"], "--entry-bound goes with --eps"),
    (["--eps", "2", "--entry-bound", "0.5"], "--eps must be in"),
    (["--eps", "1e-3", "--entry-bound", "0.5", "--causal"], "--eps: the approximate bounds"),
    (["--eps", "1e-3", "--entry-bound", "-1"], "--entry-bound"),
])
def test_bound_eps_refusals_are_one_line(capsys, extra, flag):
    assert main(["bound", "--N", "256", "--d", "8", "--M", "2000", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err
    assert err[0].startswith("attnio bound: error: --"), err  # the flag first, once
