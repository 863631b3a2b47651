"""A fairness problem from a table (cfjax.sensitivity.from_frame): columns by name, explicit
codings of text, and the errors a user can act on. References are built by hand in numpy."""

import jax
import numpy as np
import pandas as pd
import pytest

from cfjax._checks import ValidationError
from cfjax.sensitivity import frame as F
from cfjax.sensitivity import fitting as M
from cfjax.sensitivity import problem as P

TINY = M.FitConfig(degrees=(2,), lambdas=(1.0,), predictor_degrees=(2,), predictor_lambdas=(1.0,), folds=2)
GRAPH = {"lsat": ["race", "gpa"], "gpa": ["race"]}  # topological order: gpa, lsat


def table(rng, n=60):
    """A law-school-shaped table with a text sensitive attribute and a text extra column."""
    white = rng.random(n) < 0.6
    a = np.where(white, 1.0, -1.0)
    gpa = 0.6 * a + rng.standard_normal(n)
    lsat = 0.4 * a + 0.7 * gpa + 0.3 * gpa**2 + 0.7 * rng.standard_normal(n)
    fya = gpa + 0.5 * lsat + 0.3 * rng.standard_normal(n)
    return pd.DataFrame({"race": np.where(white, "white", "black"), "gpa": gpa, "lsat": lsat, "fya": fya,
                         "campus": rng.choice(["north", "south", "east"], n)}), a


def test_shuffled_columns_give_the_same_data_and_model(rng):
    df, a = table(rng)
    cats = {"race": {"white": 1, "black": -1}}
    ordered = F.from_frame(df, GRAPH, sensitive="race", target="fya", categories=cats)
    shuffled = F.from_frame(df[list(rng.permutation(df.columns))], dict(reversed(list(GRAPH.items()))),
                            sensitive="race", target="fya", categories=cats)
    # Reference: the columns picked by hand in the graph's topological order.
    assert ordered.graph.features == shuffled.graph.features == ("gpa", "lsat")
    for prob in (ordered, shuffled):
        np.testing.assert_allclose(prob.data.X, df[["gpa", "lsat"]].to_numpy(), rtol=1e-6)
        np.testing.assert_allclose(prob.data.y, df["fya"].to_numpy(), rtol=1e-6)
        np.testing.assert_array_equal(prob.data.group, (a > 0).astype(int))  # sorted codes: -1 then +1
        np.testing.assert_array_equal(prob.data.codes, [[-1.0], [1.0]])
        assert prob.data.names == ("gpa", "lsat") and prob.target == "fya"
    m1 = M.fit(ordered.graph, ordered.data, TINY)
    m2 = M.fit(shuffled.graph, shuffled.data, TINY)
    np.testing.assert_allclose(m1.theta, m2.theta, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m1.model_a.w, m2.model_a.w, rtol=1e-6, atol=1e-6)
    for k in m1.baseline_unfairness:
        np.testing.assert_allclose(m1.baseline_unfairness[k], m2.baseline_unfairness[k], rtol=1e-6)
    # The same model as the numeric arrays handed to make_data in the graph's order.
    direct = P.make_data(a, df[["gpa", "lsat"]].to_numpy(), df["fya"].to_numpy())
    m3 = M.fit(ordered.graph, direct, TINY)
    np.testing.assert_allclose(m1.theta, m3.theta, rtol=1e-6, atol=1e-6)


def test_text_categories_are_coded_as_given(rng):
    df, a = table(rng)
    graph = {"campus": [], "gpa": ["race", "campus"], "lsat": ["race", "gpa"]}
    order = ["south", "east", "north"]
    prob = F.from_frame(df, graph, sensitive="race", target="fya",
                        categories={"race": ["black", "white"], "campus": order}, codes="one_hot")
    j = prob.graph.index("campus")
    expected = np.array([order.index(v) for v in df["campus"]], float)  # 0, 1, 2 in the order listed
    np.testing.assert_array_equal(prob.data.X[:, j], expected)
    np.testing.assert_array_equal(prob.data.group, (df["race"] == "white").to_numpy().astype(int))
    np.testing.assert_array_equal(prob.data.codes, [[0.0], [1.0]])  # one-hot, first level dropped
    # A mapping codes the groups by the numbers given (white = -1 sorts first here).
    flipped = F.from_frame(df, GRAPH, sensitive="race", target="fya", categories={"race": {"white": -1, "black": 1}})
    np.testing.assert_array_equal(flipped.data.group, (a < 0).astype(int))
    # Several levels may share a number: the paper's White = +1, every other level -1.
    merged = F.from_frame(df, {"gpa": ["campus"], "lsat": ["campus", "gpa"]}, sensitive="campus", target="fya",
                          categories={"campus": {"north": 1, "south": -1, "east": -1}})
    np.testing.assert_array_equal(merged.data.group, (df["campus"] == "north").to_numpy().astype(int))


def test_a_csv_path_reads_like_the_frame(rng, tmp_path):
    df, _ = table(rng, 20)
    path = tmp_path / "law.csv"
    df.to_csv(path, index=False)
    cats = {"race": ["black", "white"]}
    from_path = F.from_frame(path, GRAPH, sensitive="race", target="fya", categories=cats)
    from_df = F.from_frame(df, GRAPH, sensitive="race", target="fya", categories=cats)
    np.testing.assert_allclose(from_path.data.X, from_df.data.X, rtol=1e-6)
    np.testing.assert_array_equal(from_path.data.group, from_df.data.group)


def test_bad_tables_raise_naming_the_column(rng):
    df, _ = table(rng, 20)
    cats = {"race": ["black", "white"]}

    def build(frame=df, graph=GRAPH, **kw):
        kw = {"sensitive": "race", "target": "fya", "categories": cats, **kw}
        return F.from_frame(frame, graph, **kw)

    with pytest.raises(ValidationError, match="'fya' as a feature"):
        build(graph={**GRAPH, "fya": ["gpa"]})
    with pytest.raises(ValidationError, match="'fya' as a parent"):
        build(graph={"gpa": ["race"], "lsat": ["race", "fya"]})
    with pytest.raises(ValidationError, match=r"missing \['lsat'\]"):
        build(frame=df.drop(columns="lsat"))
    nan = df.copy()
    nan.loc[3, "gpa"] = np.nan  # the fourth data row: row 4 (1-based, as `cfjax evaluate` counts)
    with pytest.raises(ValidationError, match=r"frame\['gpa'\].*missing.*first at row 4\b"):
        build(frame=nan)
    none = df.astype({"race": object})
    none.loc[5, "race"] = None
    with pytest.raises(ValidationError, match=r"frame\['race'\].*missing"):
        build(frame=none)
    odd = df.copy()
    odd.loc[2, "race"] = "asian"
    with pytest.raises(ValidationError, match=r"frame\['race'\].*unknown value\(s\) 'asian'"):
        build(frame=odd)
    with pytest.raises(ValidationError, match=r"frame\['race'\].*categories\['race'\]"):
        build(categories={})  # text without a coding
    with pytest.raises(ValidationError, match=r"no unit at level\(s\) \['other'\]"):
        build(categories={"race": ["black", "white", "other"]})
    with pytest.raises(ValidationError, match="target"):
        build(target="race")
    with pytest.raises(ValidationError, match="CSV"):
        build(frame="/nonexistent/law.csv")


def test_make_data_refuses_a_column_order_other_than_the_graphs(rng):
    df, a = table(rng, 20)
    graph = P.FairnessGraph(GRAPH, sensitive="race")
    wrong = P.make_data(a, df[["lsat", "gpa"]], df["fya"])  # names from the DataFrame
    assert wrong.names == ("lsat", "gpa")
    with pytest.raises(ValidationError, match="another order"):
        M.fit(graph, wrong, TINY)
    with pytest.raises(ValidationError, match="names"):
        P.make_data(a, df[["gpa", "lsat"]].to_numpy(), df["fya"], names=["gpa"])
    unnamed = P.make_data(a, df[["gpa", "lsat"]].to_numpy(), df["fya"].to_numpy())
    assert unnamed.names is None and "n=20, m=2" in repr(unnamed)
    # The names are static: the data stays a pytree of four arrays.
    assert len(jax.tree.leaves(wrong)) == 4
