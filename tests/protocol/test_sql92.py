"""SQL92 selectors over a matrix of expressions and property sets, checked against the same
conditions written by hand in Python (with SQL's unknowns made explicit)."""

from __future__ import annotations

import itertools

import pytest

from rocketq.protocol.sql92 import SqlError, compile_selector


def num(props, name):
    try:
        return float(props[name])
    except (KeyError, ValueError):
        return None


# expression -> the same condition in Python; None stands for SQL's unknown.
CASES = {
    "region = 'eu'": lambda p: None if "region" not in p else p["region"] == "eu",
    "region <> 'eu'": lambda p: None if "region" not in p else p["region"] != "eu",
    "amount > 100": lambda p: None if num(p, "amount") is None else num(p, "amount") > 100,
    "amount >= 100.5": lambda p: None if num(p, "amount") is None else num(p, "amount") >= 100.5,
    "amount < -3": lambda p: None if num(p, "amount") is None else num(p, "amount") < -3,
    "amount BETWEEN 10 AND 200": lambda p: None if num(p, "amount") is None
    else 10 <= num(p, "amount") <= 200,
    "amount NOT BETWEEN 10 AND 200": lambda p: None if num(p, "amount") is None
    else not 10 <= num(p, "amount") <= 200,
    "region IN ('eu', 'us')": lambda p: None if "region" not in p
    else p["region"] in ("eu", "us"),
    "region NOT IN ('eu')": lambda p: None if "region" not in p else p["region"] != "eu",
    "region IS NULL": lambda p: "region" not in p,
    "region IS NOT NULL": lambda p: "region" in p,
    "vip = TRUE": lambda p: None if p.get("vip", "").lower() not in ("true", "false")
    else p["vip"].lower() == "true",
    "FALSE": lambda p: False,
}


def and3(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def or3(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def not3(a):
    return None if a is None else not a


PROPERTY_SETS = [
    {}, {"region": "eu"}, {"region": "us", "amount": "150"}, {"region": "asia", "amount": "5"},
    {"amount": "100.5"}, {"amount": "-7", "vip": "TRUE"}, {"amount": "abc", "region": "eu"},
    {"region": "eu", "amount": "200", "vip": "false"}, {"vip": "maybe"},
]


@pytest.mark.parametrize("expression", list(CASES))
def test_simple_conditions(expression):
    selector = compile_selector(expression)
    for props in PROPERTY_SETS:
        assert selector(props) is (CASES[expression](props) is True), (expression, props)


@pytest.mark.parametrize("left,right", list(itertools.combinations(list(CASES)[:9], 2)))
def test_combinations_follow_three_valued_logic(left, right):
    f, g = CASES[left], CASES[right]
    combos = {
        f"({left}) AND ({right})": lambda p: and3(f(p), g(p)),
        f"({left}) or ({right})": lambda p: or3(f(p), g(p)),
        f"NOT ({left}) AND NOT ({right})": lambda p: and3(not3(f(p)), not3(g(p))),
    }
    for expression, expected in combos.items():
        selector = compile_selector(expression)
        for props in PROPERTY_SETS:
            assert selector(props) is (expected(props) is True), (expression, props)


@pytest.mark.parametrize("bad", ["", "region =", "a > 'x'", "AND", "amount", "1",
                                 "amount BETWEEN 'a' AND 2", "a IN ()", "(a = 1",
                                 "a = 1 b = 2", "'x' IN ('x')"])
def test_bad_expressions_raise_sql_error(bad):
    with pytest.raises(SqlError):
        compile_selector(bad)


def test_quotes_and_case():
    assert compile_selector("name = 'it''s'")({"name": "it's"})
    assert compile_selector("a Between 1 and 2 AnD b Is Not Null")({"a": "1", "b": "x"})
