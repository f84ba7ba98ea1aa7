"""The packed copies of the bounds' parameter tables (``params.f64``, ``levelled.f64``) hold
exactly the numbers of their JSON tables (``params.json``, ``levelled.json``), and the tables the
bounds read from them are those the JSON gives (the packed copies only make a cold load fast)."""

from __future__ import annotations

import json
import os

import pytest

from attnio.bounds import levelled, params

FOLDER = os.path.dirname(os.path.abspath(params.__file__))


def _json(name: str) -> dict:
    with open(os.path.join(FOLDER, name), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("packed", sorted(params.PACKED))
def test_packed_copy_equals_its_json(packed):
    source, keys = params.PACKED[packed]
    data = _json(source)
    got = params.read_packed(params.packed_bytes(packed))
    assert list(got) == list(keys)
    for key, cols in keys.items():
        want = [float(v) for v in data[key]] if cols == 0 else \
            [[float(v) for v in row[:cols]] for row in data[key]]
        assert got[key] == want, key  # float equality: the same doubles, bit for bit


def test_tables_read_are_the_json_ones():
    params._load.cache_clear()
    levelled.nodes.cache_clear()
    levelled.alternates.cache_clear()
    p = _json("params.json")
    assert params.grid() == tuple(p["grid_log2_x"])
    for name in "ABDE":
        assert params.table(name) == tuple((r[0], r[1]) for r in p[name])
    assert params.matmul() == (p["C"][0], p["C"][1])
    lv = _json("levelled.json")
    assert levelled.nodes() == tuple(tuple(float(v) for v in r) for r in lv["nodes"])
    assert levelled.alternates() == tuple(sorted((tuple(float(v) for v in r)
                                                  for r in lv.get("alternates", [])),
                                                 key=lambda n: n[0]))


def test_write_then_read_round_trip(tmp_path):
    arrays = {"flat": [0.1, -2.5, 1e300], "rows": [[1.0, 2.0], [3.0, 5e-324]], "none": []}
    path = tmp_path / "t.f64"
    params.write_packed(str(path), arrays)
    assert params.read_packed(path.read_bytes()) == arrays
    with pytest.raises(ValueError, match="packed table"):
        params.read_packed(b"{}")
