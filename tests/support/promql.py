"""Metric names in a PromQL expression, by a small lexer: for tests that check what an alert
rule or a dashboard queries exists on /metrics.

The lexer follows Prometheus' own (prometheus/prometheus promql/parser/lex.go): strings in
", ' or ` quotes, durations (`5m`, `1h30m`, `10ms`), numbers, identifiers with colons
(recording rules), `#` comments, and the keywords that are not metric names (aggregation
modifiers `by`/`without`, vector matching `on`/`ignoring`/`group_left`/`group_right`,
`bool`, `offset`, the set operators, `atan2`, `Inf`/`NaN`). An identifier followed by `(`
is a function or an aggregation; inside `{...}` identifiers are label names, except that a
`__name__="x"` matcher names the metric `x`; label lists of the modifiers are skipped.
Grafana's interval variables (`$__rate_interval`, `$__interval`, `$__range`) stand for a
duration; any other `$variable` outside a string is refused, as is any character PromQL does
not have, or an unbalanced bracket. Errors are ValueError naming the position.
"""

from __future__ import annotations

import dataclasses
import re

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
    |(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    |(?P<variable>\$\{?\w+(?::\w+)?\}?)
    |(?P<duration>(?:[0-9]+(?:ms|[smhdwy]))+(?![A-Za-z0-9_:]))
    |(?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@:])
    """,
    re.VERBOSE,
)
#: Grafana's variables that expand to a duration (its "global variables").
INTERVAL_VARIABLES = frozenset({"__rate_interval", "__interval", "__range"})
#: Words PromQL reserves: never a metric name where they stand.
KEYWORDS = frozenset(
    {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"}
    | {"by", "without", "on", "ignoring", "group_left", "group_right"}
)
#: Keywords followed by a parenthesised list of label names.
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_PAIRS = {")": "(", "}": "{", "]": "["}


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str
    text: str
    at: int


def tokens(expr: str) -> list[Token]:
    """`expr` as tokens, spaces and comments dropped; ValueError for what PromQL has not."""
    out: list[Token] = []
    stack: list[str] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"unexpected {expr[position]!r} at {position} in {expr!r}")
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "variable":
            name = text.strip("${}").split(":")[0]
            if name not in INTERVAL_VARIABLES:
                raise ValueError(f"variable {text} at {position} outside a string in {expr!r}")
            kind = "duration"
        if kind == "op" and text in "({[":
            stack.append(text)
        elif kind == "op" and text in ")}]" and (not stack or stack.pop() != _PAIRS[text]):
            raise ValueError(f"unbalanced {text!r} at {position} in {expr!r}")
        if kind != "space":
            out.append(Token(kind, text, position))
        position = match.end()
    if stack:
        raise ValueError(f"unclosed {stack[-1]!r} in {expr!r}")
    return out


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1]) if text[0] != "`" else text[1:-1]


def selectors(expr: str) -> list[tuple[str, int]]:
    """Each metric name `expr` selects, with the index of its token in `tokens(expr)`."""
    toks = tokens(expr)
    found: list[tuple[str, int]] = []
    depth = {"{": 0, "[": 0}
    skip_list = False
    for i, tok in enumerate(toks):
        following = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind == "op":
            if tok.text in "{[":
                depth[tok.text] += 1
            elif tok.text in "}]":
                depth[_PAIRS[tok.text]] -= 1
            elif tok.text == ")":
                skip_list = False
            continue
        if skip_list or depth["["] or tok.kind != "ident":
            continue
        if depth["{"]:
            # A label matcher; `__name__="x"` is the metric's name written as a label.
            if tok.text == "__name__":
                op, value = toks[i + 1], toks[i + 2]
                if op.text != "=" or value.kind != "string":
                    raise ValueError(f"__name__ must be matched with = in {expr!r}")
                found.append((_unquote(value.text), i))
            continue
        word = tok.text.lower()
        if word in LABEL_LISTS and following is not None and following.text == "(":
            skip_list = True
            continue
        if word in KEYWORDS:
            continue
        if following is not None and (
            following.text == "(" or following.text.lower() in ("by", "without")
        ):
            continue  # a function, or an aggregation (`sum by (x) (...)` too)
        found.append((tok.text, i))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads."""
    return {name for name, _ in selectors(expr)}


def enclosing_call(expr: str, index: int) -> str | None:
    """The function or aggregation whose parentheses hold token `index` most closely
    (`max` for `max by (a) (x)`, `max(x) by (a)` and `max(x)`); None at the top level."""
    toks = tokens(expr)
    depth = 0
    for j in range(index - 1, -1, -1):
        text = toks[j].text
        if text == ")":
            depth += 1
        elif text == "(" and depth:
            depth -= 1
        elif text == "(":
            before = j - 1
            if before >= 0 and toks[before].text == ")":
                # `agg by (labels) (expr)`: step over the label list to the aggregation.
                while toks[before].text != "(":
                    before -= 1
                before -= 2
            if before >= 0 and toks[before].kind == "ident":
                return toks[before].text.lower()
            return None
    return None
