"""Computation DAGs for the red-blue pebble game: attention, matmul, and small test graphs.

A :class:`DAG` is a list of named nodes, each with its predecessors (the operands of the
operation that computes it) and an operation label.  **Inputs** are the nodes without
predecessors: they start in slow memory (blue).  **Outputs** must end in slow memory.  Every
node is one word, whatever operation produced it; constants (the softmax scale) are not words.
Binary operations only: a sum of n terms is a chain of n - 1 additions, left to right, so that
the DAG never needs more than 3 red pebbles to compute a node (2 operands + the result).

Attention (:func:`attention`), for Nq queries, Nkv keys/values and head dimension d, with
``i`` a query, ``j`` a key, ``k`` a head-dimension index and ``c`` an output column::

    qk[i,j,k] = Q[i,k] * K[j,k]                         Nq·Nkv·d products
    x[i,j]    = ((qk[i,j,0] + qk[i,j,1]) + ...) + qk[i,j,d-1]   chain of d - 1 additions
                (for d = 1, x[i,j] is qk[i,j,0] itself)
    s[i,j]    = scale * x[i,j]                          scaling (one unary node per score)
    m[i]      = max(...max(s[i,0], s[i,1])..., s[i,Nkv-1])     row max chain (rowmax=True only;
                for Nkv = 1, m[i] is s[i,0])
    e[i,j]    = exp(s[i,j] - m[i])   (rowmax=True: two operands, subtraction fused into exp)
              = exp(s[i,j])          (rowmax=False: the unstable variant, one operand)
    l[i]      = ((e[i,0] + e[i,1]) + ...) + e[i,Nkv-1]       row sum chain
    normalize="P" (default, the order of the issue: divide, then multiply by V):
        p[i,j]  = e[i,j] / l[i]
        pv[i,j,c] = p[i,j] * V[j,c];   O[i,c] = chain sum over j of pv[i,j,c]
    normalize="O" (deferred normalisation, as FlashAttention does it):
        pv[i,j,c] = e[i,j] * V[j,c];   u[i,c] = chain sum over j;   O[i,c] = u[i,c] / l[i]

Matmul (:func:`matmul`) C = A·B with A m×k, B k×n: ``prod[i,j,l] = A[i,l]*B[l,j]`` and
``C[i,j]`` the chain sum over l (for k = 1, C[i,j] is the product itself).  Every C[i,j] is an
output.

>>> g = matmul(2, 2, 2)
>>> (len(g), len(g.inputs), len(g.outputs), g.max_indegree)
(20, 8, 4, 2)
>>> g.preds_of("C[0,1]")
('prod[0,1,0]', 'prod[0,1,1]')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.checks import check_bool, check_choice, check_int
from ..core.errors import ParameterError

__all__ = ["DAG", "attention", "binary_tree", "chain", "evaluate", "from_preds", "matmul"]


@dataclass(frozen=True)
class DAG:
    """A computation DAG: nodes in topological order (every node after its predecessors).

    Attributes
    ----------
    names : tuple of str
        Node names, unique; index ``v`` of a node is its position here.
    preds : tuple of tuple of int
        ``preds[v]``: indices of the operands of node v (empty for inputs).
    ops : tuple of str
        The operation that computes each node ("input" for inputs).
    outputs : tuple of int
        Nodes that must be blue at the end.
    title : str
        A short description ("attention Nq=2 Nkv=2 d=1 rowmax normalize=P").
    """

    names: tuple[str, ...]
    preds: tuple[tuple[int, ...], ...]
    ops: tuple[str, ...]
    outputs: tuple[int, ...]
    title: str = "dag"
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if len(self.names) != len(self.preds) or len(self.names) != len(self.ops):
            raise ParameterError("names, preds and ops must have the same length", param="names")
        index: dict[str, int] = {}
        for v, name in enumerate(self.names):
            if name in index:
                raise ParameterError(f"node name {name!r} is used twice", param="names")
            index[name] = v
            for u in self.preds[v]:
                if not 0 <= u < v:
                    raise ParameterError(
                        f"node {name!r}: predecessor index {u} must precede it (topological order)", param="preds")
        if not self.outputs:
            raise ParameterError("a DAG needs at least one output", param="outputs")
        for o in self.outputs:
            if not 0 <= o < len(self.names):
                raise ParameterError(f"output index {o} is not a node", param="outputs")
            if not self.preds[o]:
                raise ParameterError(f"output {self.names[o]!r} is an input: nothing to compute", param="outputs")
        object.__setattr__(self, "_index", index)

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ParameterError(f"no node named {name!r} in {self.title}", param="name") from None

    def preds_of(self, name: str) -> tuple[str, ...]:
        return tuple(self.names[u] for u in self.preds[self.index(name)])

    @property
    def inputs(self) -> tuple[int, ...]:
        return tuple(v for v in range(len(self)) if not self.preds[v])

    @property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.names]
        for v, ps in enumerate(self.preds):
            for u in ps:
                out[u].append(v)
        return tuple(tuple(s) for s in out)

    @property
    def n_edges(self) -> int:
        return sum(len(p) for p in self.preds)

    @property
    def max_indegree(self) -> int:
        return max(len(p) for p in self.preds)

    def min_pebbles(self) -> int:
        """The least M for which the game can be won: max in-degree + 1 (operands + result)."""
        return self.max_indegree + 1

    def trivial_bound(self) -> int:
        """I/O every schedule needs: each input with a successor is read, each output written.

        Holds for every schedule of any length (the only horizon-independent lower bound this
        module computes).
        """
        succs = self.succs
        return sum(1 for v in self.inputs if succs[v]) + len(set(self.outputs))

    def is_input(self, v: int) -> bool:
        return not self.preds[v]


class _Builder:
    def __init__(self, title: str):
        self.title = title
        self.names: list[str] = []
        self.preds: list[tuple[int, ...]] = []
        self.ops: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, name: str, preds: Sequence[str] = (), op: str = "input") -> str:
        self.index[name] = len(self.names)
        self.names.append(name)
        self.preds.append(tuple(dict.fromkeys(self.index[p] for p in preds)))  # no repeats
        self.ops.append(op)
        return name

    def inputs(self, name: str, rows: int, cols: int) -> None:
        """The input nodes ``name[i,j]`` of a rows × cols matrix, row by row."""
        for i in range(rows):
            for j in range(cols):
                self.add(f"{name}[{i},{j}]")

    def chain(self, name: str, terms: Sequence[str], op: str) -> str:
        """Left-to-right chain of binary ``op``; the last node is called ``name``.

        With one term there is no new node: the term itself is returned.
        """
        if len(terms) == 1:
            return terms[0]
        acc = terms[0]
        for k in range(1, len(terms)):
            nm = name if k == len(terms) - 1 else f"{name}~{k}"
            acc = self.add(nm, (acc, terms[k]), op)
        return acc

    def build(self, outputs: Iterable[str]) -> DAG:
        return DAG(tuple(self.names), tuple(self.preds), tuple(self.ops),
                   tuple(self.index[o] for o in outputs), self.title)


def from_preds(preds: dict[str, Sequence[str]], outputs: Sequence[str], *, title: str = "dag",
               ops: dict[str, str] | None = None) -> DAG:
    """A DAG from ``{node: operands}`` (inputs map to ``()``), listed in topological order."""
    b = _Builder(title)
    for name, ps in preds.items():
        for p in ps:
            if p not in b.index:
                raise ParameterError(f"node {name!r}: operand {p!r} must be listed before it", param="nodes")
        b.add(name, tuple(ps), (ops or {}).get(name, "op" if ps else "input"))
    for o in outputs:
        if o not in b.index:
            raise ParameterError(f"output {o!r} is not a node", param="outputs")
    return b.build(outputs)


def chain(n: int) -> DAG:
    """x0 (input) -> x1 -> ... -> xn (output): n unary operations in a row."""
    n = check_int("n", n, minimum=1)
    b = _Builder(f"chain n={n}")
    b.add("x0")
    for k in range(1, n + 1):
        b.add(f"x{k}", (f"x{k - 1}",), "f")
    return b.build([f"x{n}"])


def binary_tree(leaves: int) -> DAG:
    """A complete binary reduction tree over ``leaves`` inputs (a power of two); the root is the output."""
    leaves = check_int("leaves", leaves, minimum=2)
    if leaves & (leaves - 1):
        raise ParameterError(f"leaves must be a power of two >= 2, got {leaves}", param="leaves")
    b = _Builder(f"binary tree leaves={leaves}")
    level = [b.add(f"leaf{i}") for i in range(leaves)]
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [b.add(f"n{depth}_{i}", (level[2 * i], level[2 * i + 1]), "+")
                 for i in range(len(level) // 2)]
    return b.build(level)


def matmul(m: int, k: int, n: int) -> DAG:
    """C = A·B, A m×k, B k×n: products and left-to-right summation chains; C is the output."""
    m, k, n = check_int("m", m), check_int("k", k), check_int("n", n)
    b = _Builder(f"matmul {m}x{k}x{n}")
    b.inputs("A", m, k)
    b.inputs("B", k, n)
    outs = []
    for i in range(m):
        for j in range(n):
            terms = [b.add(f"prod[{i},{j},{l_}]", (f"A[{i},{l_}]", f"B[{l_},{j}]"), "*")
                     for l_ in range(k)]
            if k == 1:
                outs.append(terms[0])
            else:
                outs.append(b.chain(f"C[{i},{j}]", terms, "+"))
    return b.build(outs)


def attention(Nq: int, d: int, *, Nkv: int | None = None, rowmax: bool = True,
              normalize: str = "P") -> DAG:
    """The DAG of exact attention softmax(scale·QKᵀ)·V with the structure in the module docstring."""
    Nq = check_int("Nq", Nq)
    Nkv = Nq if Nkv is None else check_int("Nkv", Nkv)
    d = check_int("d", d)
    normalize = check_choice("normalize", normalize, ("P", "O"))
    rowmax = check_bool("rowmax", rowmax)
    title = (f"attention Nq={Nq} Nkv={Nkv} d={d} {'rowmax' if rowmax else 'no-max'} "
             f"normalize={normalize}")
    b = _Builder(title)
    b.inputs("Q", Nq, d)
    b.inputs("K", Nkv, d)
    b.inputs("V", Nkv, d)
    outs = []
    for i in range(Nq):
        s = []
        for j in range(Nkv):
            prods = [b.add(f"qk[{i},{j},{k}]", (f"Q[{i},{k}]", f"K[{j},{k}]"), "*")
                     for k in range(d)]
            x = b.chain(f"x[{i},{j}]", prods, "+")
            s.append(b.add(f"s[{i},{j}]", (x,), "scale"))
        if rowmax:
            m = b.chain(f"m[{i}]", s, "max")
            e = [b.add(f"e[{i},{j}]", (s[j],) if m == s[j] else (s[j], m), "exp(s-m)")
                 for j in range(Nkv)]
        else:
            e = [b.add(f"e[{i},{j}]", (s[j],), "exp") for j in range(Nkv)]
        li = b.chain(f"l[{i}]", e, "+")
        if normalize == "P":
            p = [b.add(f"p[{i},{j}]", (e[j], li), "/") for j in range(Nkv)]
            for c in range(d):
                pv = [b.add(f"pv[{i},{j},{c}]", (p[j], f"V[{j},{c}]"), "*") for j in range(Nkv)]
                outs.append(b.chain(f"O[{i},{c}]", pv, "+"))
        else:
            for c in range(d):
                pv = [b.add(f"pv[{i},{j},{c}]", (e[j], f"V[{j},{c}]"), "*") for j in range(Nkv)]
                u = b.chain(f"u[{i},{c}]", pv, "+")
                outs.append(b.add(f"O[{i},{c}]", (u, li), "/"))
    return b.build(outs)


def evaluate(dag: DAG, inputs: dict[str, float], *, scale: float = 1.0) -> list[float]:
    """The value of every node, given the inputs' values (a check that the DAG computes what it says).

    Operations: ``*``, ``+``, ``max``, ``/``, ``scale`` (multiply by ``scale``), ``exp``,
    ``exp(s-m)`` (exp of the first operand minus the second; with one operand, exp(0) = 1), ``f``
    (the identity, for :func:`chain`).
    """
    import math

    val: list[float] = [0.0] * len(dag)
    for v, (name, ps, op) in enumerate(zip(dag.names, dag.preds, dag.ops)):
        x = [val[u] for u in ps]
        if not ps:
            if name not in inputs:
                raise ParameterError(f"no value given for input {name!r}", param="inputs")
            val[v] = float(inputs[name])
        elif op == "*":
            val[v] = x[0] * x[1]
        elif op == "+":
            val[v] = x[0] + x[1]
        elif op == "max":
            val[v] = max(x)
        elif op == "/":
            val[v] = x[0] / x[1] if len(x) == 2 else 1.0
        elif op == "scale":
            val[v] = scale * x[0]
        elif op == "exp":
            val[v] = math.exp(x[0])
        elif op == "exp(s-m)":
            val[v] = math.exp(x[0] - x[1]) if len(x) == 2 else 1.0
        elif op == "f":
            val[v] = x[0]
        else:
            raise ParameterError(f"node {name!r}: no evaluation rule for operation {op!r}", param="nodes")
    return val
