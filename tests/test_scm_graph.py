"""Graph validation, ordering and hashability."""

import jax
import jax.numpy as jnp
import pytest

import cfjax as cf


def test_topological_order_keeps_given_order_among_ready_nodes():
    g = cf.scm.Graph.from_parents({"x4": ["x2", "x3"], "x0": [], "x2": ["x1"], "x1": ["x0"], "x3": ["x0"]})
    assert g.order == ("x0", "x1", "x3", "x2", "x4")
    for v in g.order:
        assert all(g.order.index(p) < g.order.index(v) for p in g.parents_of(v))
    assert g.descendants("x1") == ("x2", "x4")
    assert g.children("x0") == ("x1", "x3")


def test_graph_is_hashable_and_static_under_jit():
    g1 = cf.scm.Graph.from_parents({"a": [], "b": ["a"]})
    g2 = cf.scm.Graph.from_parents([("a", []), ("b", ["a"])])
    assert g1 == g2 and hash(g1) == hash(g2)
    f = jax.jit(lambda g, x: x * len(g.order), static_argnums=0)
    assert float(f(g1, jnp.float32(2.0))) == 4.0


@pytest.mark.parametrize(
    "parents, match",
    [
        ({"a": ["b"], "b": ["a"]}, "cycle"),
        ({"a": [], "b": ["c"]}, "unknown parent 'c'"),
        ({"a": ["a"]}, "own parent"),
        ({"a": [], "b": ["a", "a"]}, "listed twice"),
        ([("a", []), ("a", [])], "declared twice"),
        ({"a": [], "b": "a"}, "sequence of node names"),
        ({"": []}, "non-empty string"),
    ],
)
def test_bad_graphs_are_rejected(parents, match):
    with pytest.raises(ValueError, match=match):
        cf.scm.Graph.from_parents(parents)


def test_unknown_node_lookup():
    g = cf.scm.Graph.from_parents({"a": []})
    with pytest.raises(ValueError, match="unknown node 'z'"):
        g.descendants("z")
