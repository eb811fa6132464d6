"""Label selectors as Kubernetes parses and matches them (a bypass's --selector).

Upstream: kubernetes/apimachinery pkg/labels/selector.go. `Parse` documents the grammar
(`x in (foo,,baz),y,z notin ()` is valid; the empty string is a valid value; `y` alone
means the key exists, `!y` that it does not) and `Requirement.Matches` what matches:
`in`/`=`/`==` need the key with one of the values; `notin`/`!=` match when the key is
absent; `>`/`<` need the key with an integer value. Keys are qualified names
(`IsQualifiedName`), values label values (`IsValidLabelValue`, at most 63 characters).
"""

from __future__ import annotations

import pytest

from workflows.hookpath import labelselector

LABELS = {"env": "prod", "tier": "web", "example.com/team": "payments", "replicas": "3"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("env=prod", True),
        ("env==prod", True),
        ("env=staging", False),
        ("env!=staging", True),
        ("env!=prod", False),
        ("absent!=x", True),  # NotEquals matches a missing key
        ("env in (prod,staging)", True),
        ("env in (staging)", False),
        ("absent in (x)", False),
        ("env notin (staging)", True),
        ("absent notin (x)", True),  # NotIn matches a missing key
        ("env", True),
        ("absent", False),
        ("!absent", True),
        ("!env", False),
        ("replicas>2", True),
        ("replicas<3", False),
        ("env>2", False),  # not an integer: no match
        ("example.com/team=payments", True),
        ("env=prod,tier=db", False),  # requirements are ANDed
        ("env=prod, tier in (web, api) ,!canary", True),
        ("x in (foo,,baz),env,z notin ()", False),  # upstream's own example; x is absent
        ("absent=", False),
        ("absent notin ()", True),
    ],
)
def test_a_selector_matches_as_kubernetes_matches_it(selector: str, expected: bool) -> None:
    assert labelselector.matches(labelselector.parse(selector), LABELS) is expected


def test_an_empty_value_is_a_value() -> None:
    assert labelselector.matches(labelselector.parse("x in (a,)"), {"x": ""})
    assert labelselector.matches(labelselector.parse("x="), {"x": ""})
    assert not labelselector.matches(labelselector.parse("x="), {})


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        ("env=prod,", "a ',' must be followed by a requirement"),
        (",env", "found ',', expected a label key"),
        ("env=prod tier=web", "found 'tier', expected ',' or the end"),
        ("env in prod", "expected '(' after in or notin"),
        ("env in (prod", "found 'the end' in a value set, expected ')'"),
        ("env in (a b)", "found 'b' in a value set, expected ')'"),
        ("env ~ prod", "found '~' after 'env', expected =, ==, !=, in, notin, > or <"),
        ("!env=prod", "found '=', expected ',' or the end"),
        ("replicas>three", "replicas>three: the value must be an integer"),
        ("Bad_/x=1", "'Bad_/x' is not a valid label key"),
        ("-env=1", "'-env' is not a valid label key"),
        ("env=-prod", "'-prod' is not a valid label value"),
        ("env=" + "a" * 64, "is not a valid label value"),
        ("k" * 64 + "=v", "is not a valid label key"),
        ("env=(x)", "found '(', expected a value after '='"),
    ],
)
def test_a_malformed_selector_is_refused_saying_where(selector: str, error: str) -> None:
    with pytest.raises(labelselector.SelectorError) as raised:
        labelselector.parse(selector)
    assert error in str(raised.value)
