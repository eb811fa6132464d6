"""Kubernetes label selectors in their string form (`env=prod,tier notin (db),!canary`): pure.

The grammar and what each operator matches are Kubernetes' own (apimachinery
pkg/labels/selector.go, `Parse` and `Requirement.Matches`): requirements joined by commas
are ANDed; `=`/`==` and `in` need the label with one of the values; `!=` and `notin` also
match a cluster without the label; a bare key needs the label, `!key` its absence; `>`/`<`
compare integers. Keys are qualified names and values label values, as Kubernetes checks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
#: Operators, longest first so that `==` is not read as `=` then `=`.
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_SPECIAL = frozenset("=!(),><")
_WORD_OPERATORS = {"in", "notin"}
_INTEGER = re.compile(r"[-+]?\d+")


class SelectorError(ValueError):
    """A label selector that does not parse; the message says where and what is expected."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    #: One of =, ==, !=, in, notin, exists, !, >, <.
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key, "")
        if self.operator in ("=", "==", "in"):
            return has and value in self.values
        if self.operator in ("!=", "notin"):
            return not has or value not in self.values
        if self.operator == "exists":
            return has
        if self.operator == "!":
            return not has
        if not has or not _INTEGER.fullmatch(value):
            return False
        number, bound = int(value), int(self.values[0])
        return number > bound if self.operator == ">" else number < bound


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in " \t\r\n":
            i += 1
        elif text[i] in _SPECIAL:
            symbol = next((s for s in _SYMBOLS if text.startswith(s, i)), "")
            tokens.append(symbol)
            i += len(symbol)
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL and text[i] not in " \t\r\n":
                i += 1
            tokens.append(text[start:i])
    return tokens


def _is_word(token: str) -> bool:
    return bool(token) and token not in _SYMBOLS


def is_key(word: str) -> bool:
    """Whether `word` is a label key: a qualified name, with an optional DNS-subdomain prefix."""
    name = word.rpartition("/")[2]
    return bool(_KEY.fullmatch(word)) and len(name) <= 63 and len(word) - len(name) <= 254


def _key(word: str) -> str:
    if not is_key(word):
        raise SelectorError(f"{word!r} is not a valid label key")
    return word


def _value(word: str) -> str:
    if len(word) > 63 or not _VALUE.fullmatch(word):
        raise SelectorError(f"{word!r} is not a valid label value")
    return word


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self) -> str:
        word = self.peek()
        self.at += 1
        return word

    def word(self) -> str:
        """The next token if it is a word (a key or value), else ""."""
        return self.take() if _is_word(self.peek()) else ""

    def requirement(self) -> Requirement:
        negated = self.peek() == "!"
        if negated:
            self.take()
        word = self.word()
        if not word:
            raise SelectorError(f"found {self.peek() or 'the end'!r}, expected a label key")
        key = _key(word)
        if negated or self.peek() in ("", ","):
            return Requirement(key, "!" if negated else "exists")
        operator = self.take()
        if operator in _WORD_OPERATORS:
            return Requirement(key, operator, self.value_set())
        if operator not in ("=", "==", "!=", ">", "<"):
            raise SelectorError(
                f"found {operator!r} after {key!r}, expected =, ==, !=, in, notin, > or <"
            )
        value = self.word()
        if not value and self.peek() not in ("", ","):
            raise SelectorError(f"found {self.peek()!r}, expected a value after {operator!r}")
        if operator in (">", "<") and not _INTEGER.fullmatch(value):
            raise SelectorError(f"{key}{operator}{value}: the value must be an integer")
        return Requirement(key, operator, (_value(value),))

    def value_set(self) -> tuple[str, ...]:
        if self.take() != "(":
            raise SelectorError("expected '(' after in or notin")
        values: set[str] = set()
        expect_value = True
        while True:
            item = self.take()
            if item in (")", ","):
                if expect_value:
                    values.add("")  # `()`, `(,a)` and `(a,)` hold the empty value
                if item == ")":
                    return tuple(sorted(values))
                expect_value = True
            elif _is_word(item) and expect_value:
                values.add(_value(item))
                expect_value = False
            else:
                raise SelectorError(f"found {item or 'the end'!r} in a value set, expected ')'")


def parse(text: str) -> tuple[Requirement, ...]:
    """The requirements of `text` ("" selects every cluster); SelectorError if malformed."""
    parser = _Parser(text)
    requirements: list[Requirement] = []
    while parser.peek():
        requirements.append(parser.requirement())
        separator = parser.take()
        if separator not in ("", ","):
            raise SelectorError(f"found {separator!r}, expected ',' or the end")
        if separator == "," and parser.peek() in ("", ","):
            raise SelectorError("a ',' must be followed by a requirement")
    return tuple(requirements)


def matches(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)
