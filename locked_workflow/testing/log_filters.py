"""CloudWatch Logs filter patterns, evaluated offline against log lines.

Metric filters and subscription filters do not run in the local runtime (the deployer skips
them); this module lets a test evaluate a synthesized ``FilterPattern`` against the lines a
local execution wrote (``patches/execution_logs``)::

    matches('{ ($.type = "FailStateEntered") && ($.details.name = "Lock.Timeout") }', line)

Supported, as documented for CloudWatch Logs:

* JSON patterns ``{ <expression> }``: selectors ``$.a.b``, ``$.a[0]`` (a field missing on the
  way, or a line that is not a JSON object, matches no comparison but ``NOT EXISTS``);
  ``=`` / ``!=`` against a quoted or unquoted string, with ``*`` matching any run of
  characters (a number is compared by its JSON text, so ``{ $.n = 12* }`` works);
  ``=``, ``!=``, ``<``, ``>``, ``<=``, ``>=`` against a number (numeric fields only);
  ``IS TRUE``, ``IS FALSE``, ``IS NULL``, ``NOT EXISTS``; ``&&``, ``||`` and parentheses
  (``&&`` binds tighter).
* Term patterns: ``""`` matches every line; otherwise every term (a word, or a quoted phrase)
  must occur in the line.

Anything else (regular expressions ``%...%``, ``-term`` exclusions, space-delimited ``[...]``
patterns) raises :class:`UnsupportedFilterPattern` instead of guessing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["matches", "compile_pattern", "FilterPatternError", "UnsupportedFilterPattern"]


class FilterPatternError(ValueError):
    """The pattern is not valid filter pattern syntax."""


class UnsupportedFilterPattern(FilterPatternError):
    """Valid syntax this evaluator does not implement."""


_MISSING = object()
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<op>&&|\|\||!=|<=|>=|=|<|>|\(|\))
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<selector>\$(?:\.[A-Za-z0-9_@\-]+|\[\d+\])*)
      | (?P<word>[^\s()&|=!<>"]+)
    )""",
    re.VERBOSE,
)
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def matches(pattern: str, message: str) -> bool:
    """Does ``message`` (one log event) match ``pattern``?"""
    return compile_pattern(pattern)(message)


def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """The predicate of ``pattern`` over log event messages."""
    text = pattern.strip()
    if text.startswith("{"):
        if not text.endswith("}"):
            raise FilterPatternError(f"a JSON pattern must end with '}}', got: {pattern!r}")
        parser = _Parser(_tokens(text[1:-1]))
        expression = parser.expression()
        parser.expect_end()

        def json_predicate(message: str) -> bool:
            try:
                document = json.loads(message)
            except ValueError:
                return False
            return expression(document)

        return json_predicate
    if text.startswith("[") or text.startswith("%") or re.search(r"(^|\s)-\S", text):
        raise UnsupportedFilterPattern(f"only JSON and term patterns are supported, got: {pattern!r}")
    terms = [t[1:-1] if t.startswith('"') else t for t in re.findall(r'"[^"]*"|\S+', text)]
    terms = [t for t in terms if t]
    return lambda message: all(term in message for term in terms)


def _tokens(text: str) -> list[_Token]:
    found, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise FilterPatternError(f"unexpected text at {position}: {text[position:]!r}")
        kind = match.lastgroup or ""
        found.append(_Token(kind, match.group(kind)))
        position = match.end()
    return found


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.position = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise FilterPatternError("the pattern ends too early")
        self.position += 1
        return token

    def expect_end(self) -> None:
        if self.peek() is not None:
            raise FilterPatternError(f"unexpected {self.peek().text!r}")

    def expression(self) -> Callable[[Any], bool]:
        alternatives = [self.conjunction()]
        while self.peek() == _Token("op", "||"):
            self.take()
            alternatives.append(self.conjunction())
        return alternatives[0] if len(alternatives) == 1 else (lambda d: any(a(d) for a in alternatives))

    def conjunction(self) -> Callable[[Any], bool]:
        parts = [self.term()]
        while self.peek() == _Token("op", "&&"):
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else (lambda d: all(p(d) for p in parts))

    def term(self) -> Callable[[Any], bool]:
        token = self.take()
        if token == _Token("op", "("):
            inner = self.expression()
            if self.take() != _Token("op", ")"):
                raise FilterPatternError("missing ')'")
            return inner
        if token.kind != "selector":
            raise FilterPatternError(f"expected a selector such as $.field, got: {token.text!r}")
        path = _path(token.text)
        operator = self.take()
        if operator.kind == "word" and operator.text in ("IS", "NOT"):
            word = self.take().text
            if operator.text == "NOT" and word == "EXISTS":
                return lambda d: _select(d, path) is _MISSING
            checks = {"TRUE": lambda v: v is True, "FALSE": lambda v: v is False, "NULL": lambda v: v is None}
            if operator.text != "IS" or word not in checks:
                raise FilterPatternError(f"unknown test {operator.text} {word}")
            check = checks[word]
            return lambda d: (lambda v: v is not _MISSING and check(v))(_select(d, path))
        if operator.kind != "op" or operator.text in ("(", ")", "&&", "||"):
            raise FilterPatternError(f"expected a comparison after {token.text}, got: {operator.text!r}")
        value = self.take()
        return _comparison(path, operator.text, value)


def _path(selector: str) -> list[Any]:
    return [int(p[1:-1]) if p.startswith("[") else p[1:] for p in re.findall(r"\.[^.\[]+|\[\d+\]", selector[1:])]


def _select(document: Any, path: list[Any]) -> Any:
    value = document
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return _MISSING
        elif not isinstance(value, dict) or step not in value:
            return _MISSING
        value = value[step]
    return value


def _comparison(path: list[Any], operator: str, token: _Token) -> Callable[[Any], bool]:
    if token.kind == "string":
        literal, numeric = json.loads(token.text), None
    elif token.kind == "word":
        if token.text.startswith("%"):
            raise UnsupportedFilterPattern(f"regular expressions are not supported, got: {token.text}")
        literal = token.text
        numeric = float(token.text) if _NUMBER.fullmatch(token.text) else None
    else:
        raise FilterPatternError(f"expected a value after {operator}, got: {token.text!r}")

    if operator in ("<", ">", "<=", ">="):
        if numeric is None:
            raise FilterPatternError(f"{operator} needs a number, got: {token.text}")
        compare = {"<": float.__lt__, ">": float.__gt__, "<=": float.__le__, ">=": float.__ge__}[operator]

        def ordered(document: Any) -> bool:
            value = _select(document, path)
            return _is_number(value) and compare(float(value), numeric)

        return ordered

    glob = re.compile(".*".join(re.escape(part) for part in literal.split("*")), re.DOTALL)

    def equal(document: Any) -> bool:
        value = _select(document, path)
        if value is _MISSING or isinstance(value, (dict, list)) or value is None or isinstance(value, bool):
            return False
        if numeric is not None and _is_number(value):
            return float(value) == numeric
        text = value if isinstance(value, str) else json.dumps(value)
        return glob.fullmatch(text) is not None

    if operator == "=":
        return equal
    return lambda document: _select(document, path) is not _MISSING and not equal(document)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
