"""SQL92 message selectors (RocketMQ's ``MessageSelector.bySql``), evaluated on properties.

    region = 'eu' AND amount > 100
    kind IN ('a', 'b') OR (flag IS NOT NULL AND NOT score BETWEEN 1 AND 5)

Supported: comparisons (``= <> != > >= < <=``), ``[NOT] BETWEEN .. AND ..``, ``[NOT] IN
(..)``, ``IS [NOT] NULL``, ``AND``/``OR``/``NOT`` and parentheses, string literals in single
quotes, integer and decimal numbers, ``TRUE``/``FALSE``. Keywords are case-insensitive.

Logic is SQL's three-valued logic: a missing property, or one that is not a number where a
number is compared, makes a comparison *unknown*; a message matches only when the whole
expression is true. Parsing uses lark (an LALR grammar); a bad expression raises SqlError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import LarkError

Selector = Callable[[Mapping[str, str]], bool]
_Value = Callable[[Mapping[str, str]], Any]

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*         -> or_
?and_expr: not_expr (_AND not_expr)*       -> and_
?not_expr: _NOT not_expr                   -> not_
         | predicate
?predicate: operand COMPARATOR operand                          -> compare
          | operand _BETWEEN operand _AND operand               -> between
          | operand _NOT _BETWEEN operand _AND operand          -> not_between
          | operand _IN "(" literal ("," literal)* ")"          -> in_
          | operand _NOT _IN "(" literal ("," literal)* ")"     -> not_in
          | operand _IS _NULL                                   -> is_null
          | operand _IS _NOT _NULL                              -> is_not_null
          | "(" or_expr ")"
          | boolean
?operand: IDENTIFIER -> prop
        | literal
?literal: STRING -> string
        | NUMBER -> number
        | boolean
boolean: TRUE | FALSE
COMPARATOR: "<>" | "!=" | ">=" | "<=" | "=" | ">" | "<"
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
_BETWEEN.2: /between\b/i
_IN.2: /in\b/i
_IS.2: /is\b/i
_NULL.2: /null\b/i
TRUE.2: /true\b/i
FALSE.2: /false\b/i
IDENTIFIER: /[a-zA-Z_$][a-zA-Z0-9_.$]*/
STRING: /'([^']|'')*'/
NUMBER: /-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?/
%import common.WS
%ignore WS
"""

_PARSER = Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


class SqlError(ValueError):
    """An expression that is not a valid SQL92 selector."""


#: How deep parentheses and NOTs may nest. Compiling and evaluating recurse once per level,
#: so without a bound a selector of a few thousand ``(`` or ``NOT`` would fail with
#: RecursionError, when compiled or, worse, on every message it is matched against.
MAX_DEPTH = 64


def _depth(tree: Tree) -> int:
    """How deep ``tree`` nests (walked without recursion), up to just past MAX_DEPTH."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, Tree))
    return deepest


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


class _Literal:
    """A constant operand, with its kind (str, number, bool)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Prop:
    def __init__(self, name: str) -> None:
        self.name = name


def _coerce(raw: str | None, like: Any) -> Any:
    """A property's string as the type of the literal it is compared with (None: unknown)."""
    if raw is None:
        return None
    if isinstance(like, bool):
        low = raw.lower()
        return True if low == "true" else False if low == "false" else None
    if isinstance(like, (int, float)):
        return _number(raw)
    return raw


def _getter(operand: _Prop | _Literal, like: Any) -> _Value:
    if isinstance(operand, _Literal):
        value = operand.value
        return lambda props: value
    name = operand.name
    return lambda props: _coerce(props.get(name), like)


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


@v_args(inline=True)
class _Compiler(Transformer):  # type: ignore[type-arg]
    """Turns the parse tree into closures returning True, False or None (unknown)."""

    def prop(self, token: Token) -> _Prop:
        return _Prop(str(token))

    def string(self, token: Token) -> _Literal:
        return _Literal(str(token)[1:-1].replace("''", "'"))

    def number(self, token: Token) -> _Literal:
        return _Literal(_number(str(token)))

    def boolean(self, token: Token) -> _Literal:
        return _Literal(str(token).lower() == "true")

    def compare(self, left: Any, op: Token, right: Any) -> _Value:
        operator = str(op)
        kind = (right.value if isinstance(right, _Literal) else
                left.value if isinstance(left, _Literal) else "")
        if isinstance(kind, str) and not isinstance(kind, bool) and operator not in (
                "=", "<>", "!="):
            raise SqlError(f"strings compare with =, <> and IN only, not {operator}")
        a, b = _getter(left, kind), _getter(right, kind)
        fn = _OPS[operator]

        def evaluate(props: Mapping[str, str]) -> bool | None:
            x, y = a(props), b(props)
            if x is None or y is None:
                return None
            try:
                return fn(x, y)
            except TypeError:
                return None
        return evaluate

    def _between(self, value: Any, low: Any, high: Any) -> _Value:
        if not all(isinstance(x, _Literal) and isinstance(x.value, (int, float))
                   for x in (low, high)):
            raise SqlError("BETWEEN takes two numbers")
        if isinstance(value, _Literal) and (isinstance(value.value, bool)
                                            or not isinstance(value.value, (int, float))):
            # A string or boolean would be compared with the numbers on every message.
            raise SqlError("BETWEEN needs a property or a number on its left")
        get = _getter(value, 0)
        lo, hi = low.value, high.value
        return lambda props: None if (v := get(props)) is None else lo <= v <= hi

    def between(self, value: Any, low: Any, high: Any) -> _Value:
        return self._between(value, low, high)

    def not_between(self, value: Any, low: Any, high: Any) -> _Value:
        inner = self._between(value, low, high)
        return lambda props: None if (r := inner(props)) is None else not r

    def _in(self, value: Any, *items: Any) -> _Value:
        literals = [i.value for i in items]
        if isinstance(value, _Literal):
            raise SqlError("IN needs a property on its left")
        name = value.name
        if all(isinstance(x, str) for x in literals):
            wanted = set(literals)
            return lambda props: None if (v := props.get(name)) is None else v in wanted
        numbers = {x for x in literals if not isinstance(x, (str, bool))}
        return lambda props: None if (v := _number(props.get(name) or "")) is None \
            else v in numbers

    def in_(self, value: Any, *items: Any) -> _Value:
        return self._in(value, *items)

    def not_in(self, value: Any, *items: Any) -> _Value:
        inner = self._in(value, *items)
        return lambda props: None if (r := inner(props)) is None else not r

    def is_null(self, value: Any) -> _Value:
        if isinstance(value, _Literal):
            return lambda props: value.value is None
        name = value.name
        return lambda props: name not in props

    def is_not_null(self, value: Any) -> _Value:
        inner = self.is_null(value)
        return lambda props: not inner(props)

    def not_(self, inner: Any) -> _Value:
        fn = _as_condition(inner)
        return lambda props: None if (r := fn(props)) is None else not r

    def and_(self, *parts: Any) -> _Value:
        fns = [_as_condition(p) for p in parts]

        def evaluate(props: Mapping[str, str]) -> bool | None:
            unknown = False
            for fn in fns:
                r = fn(props)
                if r is False:
                    return False
                if r is None:
                    unknown = True
            return None if unknown else True
        return evaluate

    def or_(self, *parts: Any) -> _Value:
        fns = [_as_condition(p) for p in parts]

        def evaluate(props: Mapping[str, str]) -> bool | None:
            unknown = False
            for fn in fns:
                r = fn(props)
                if r is True:
                    return True
                if r is None:
                    unknown = True
            return None if unknown else False
        return evaluate


def _as_condition(node: Any) -> _Value:
    if isinstance(node, _Literal):
        if isinstance(node.value, bool):
            value = node.value
            return lambda props: value
        raise SqlError("a condition is needed where a bare value was given")
    if isinstance(node, _Prop):
        raise SqlError(f"a condition is needed where the property {node.name!r} stands alone")
    return node


@lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Selector:
    """Compile an expression into ``fn(properties) -> bool``; raises SqlError if it is bad."""
    if not expression or not expression.strip():
        raise SqlError("the SQL92 expression is empty")
    try:
        tree = _PARSER.parse(expression)
        if _depth(tree) > MAX_DEPTH:
            raise SqlError(f"the SQL92 expression nests deeper than {MAX_DEPTH} levels")
        condition = _as_condition(_Compiler().transform(tree))
    except SqlError:
        raise
    except LarkError as exc:
        cause = exc.__context__ if isinstance(exc.__context__, SqlError) else None
        if cause is not None:
            raise SqlError(str(cause)) from None
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise SqlError(f"bad SQL92 expression {expression!r}: {first_line}") from None
    return lambda props: condition(props) is True
