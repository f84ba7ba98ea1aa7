"""The computation DAGs: sizes, structure, and that they compute attention and matmul."""

from __future__ import annotations

import numpy as np
import pytest

from attnio import reference
from attnio.core.errors import ParameterError
from attnio.pebble import dag


def _attention_nodes(Nq, Nkv, d, rowmax, normalize):
    n = Nq * d + 2 * Nkv * d                       # inputs
    n += Nq * Nkv * d + Nq * Nkv * (d - 1)         # products and their chains
    n += Nq * Nkv                                  # scaling
    n += Nq * (Nkv - 1) if rowmax else 0           # row max chain
    n += Nq * Nkv + Nq * (Nkv - 1)                 # exp and row sum chain
    if normalize == "P":
        n += Nq * Nkv + Nq * Nkv * d + Nq * d * (Nkv - 1)
    else:
        n += Nq * Nkv * d + Nq * d * (Nkv - 1) + Nq * d
    return n


@pytest.mark.parametrize("Nq,Nkv,d", [(1, 1, 1), (2, 2, 1), (2, 3, 2), (3, 3, 2)])
@pytest.mark.parametrize("rowmax", [True, False])
@pytest.mark.parametrize("normalize", ["P", "O"])
def test_attention_dag_size_matches_documented_structure(Nq, Nkv, d, rowmax, normalize):
    g = dag.attention(Nq, d, Nkv=Nkv, rowmax=rowmax, normalize=normalize)
    assert len(g) == _attention_nodes(Nq, Nkv, d, rowmax, normalize)
    assert len(g.inputs) == Nq * d + 2 * Nkv * d
    assert len(g.outputs) == Nq * d
    assert g.max_indegree == 2 and g.min_pebbles() == 3
    assert g.trivial_bound() == (Nq + 2 * Nkv) * d + Nq * d


@pytest.mark.parametrize("Nq,Nkv,d", [(1, 1, 1), (2, 2, 1), (3, 2, 2), (2, 1, 2), (3, 3, 2)])
@pytest.mark.parametrize("rowmax", [True, False])
@pytest.mark.parametrize("normalize", ["P", "O"])
def test_attention_dag_evaluates_to_reference_attention(Nq, Nkv, d, rowmax, normalize):
    rng = np.random.default_rng(7)
    Q, K, V = (rng.standard_normal((n, d)) for n in (Nq, Nkv, Nkv))
    g = dag.attention(Nq, d, Nkv=Nkv, rowmax=rowmax, normalize=normalize)
    inp = {f"Q[{i},{k}]": Q[i, k] for i in range(Nq) for k in range(d)}
    inp |= {f"K[{j},{k}]": K[j, k] for j in range(Nkv) for k in range(d)}
    inp |= {f"V[{j},{k}]": V[j, k] for j in range(Nkv) for k in range(d)}
    val = dag.evaluate(g, inp, scale=1 / np.sqrt(d))
    O = np.array([val[o] for o in g.outputs]).reshape(Nq, d)
    err = np.abs(O - reference.attention(Q, K, V)).max()
    print(f"max |O_dag - O_ref| = {err:.2e}")
    assert err < 1e-12


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 2, 2), (2, 3, 1), (3, 3, 3)])
def test_matmul_dag_evaluates_to_product(m, k, n):
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    g = dag.matmul(m, k, n)
    assert len(g) == m * k + k * n + m * n * k + m * n * (k - 1)
    inp = {f"A[{i},{l_}]": A[i, l_] for i in range(m) for l_ in range(k)}
    inp |= {f"B[{l_},{j}]": B[l_, j] for l_ in range(k) for j in range(n)}
    val = dag.evaluate(g, inp)
    C = np.array([val[o] for o in g.outputs]).reshape(m, n)
    assert np.abs(C - A @ B).max() < 1e-12


def test_dag_nodes_are_topologically_ordered_and_named_uniquely():
    g = dag.attention(3, 2)
    assert len(set(g.names)) == len(g)
    for v, ps in enumerate(g.preds):
        assert all(u < v for u in ps)
    assert g.preds_of("e[0,1]") == ("s[0,1]", "m[0]")
    assert g.preds_of("p[2,0]") == ("e[2,0]", "l[2]")
    assert g.index(g.names[5]) == 5


def test_small_dags():
    c = dag.chain(3)
    assert c.names == ("x0", "x1", "x2", "x3") and c.outputs == (3,)
    t = dag.binary_tree(4)
    assert len(t) == 7 and t.preds_of("n2_0") == ("n1_0", "n1_1")
    f = dag.from_preds({"a": (), "b": (), "c": ("a", "b")}, ["c"])
    assert f.trivial_bound() == 3


@pytest.mark.parametrize("call,word", [
    (lambda: dag.attention(0, 1), "Nq"),
    (lambda: dag.attention(2, 1, normalize="X"), "normalize"),
    (lambda: dag.attention(2, 1, rowmax=1), "rowmax"),
    (lambda: dag.matmul(2, 0, 2), "k"),
    (lambda: dag.binary_tree(3), "leaves"),
    (lambda: dag.chain(0), "n"),
    (lambda: dag.from_preds({"c": ("a",)}, ["c"]), "before"),
    (lambda: dag.from_preds({"a": ()}, ["a"]), "input"),
    (lambda: dag.attention(2, 1).index("zz"), "zz"),
])
def test_bad_parameters_raise_parameter_error_naming_them(call, word):
    with pytest.raises(ParameterError, match=word):
        call()
