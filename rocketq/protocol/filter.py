"""Tag subscriptions (RocketMQ's FilterAPI): ``"*"``, or tags joined by ``||``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .message import tags_code

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


@dataclass
class Subscription:
    """A consumer's subscription to one topic (RocketMQ's SubscriptionData)."""

    topic: str
    expression: str = SUB_ALL
    expression_type: str = EXPRESSION_TAG
    sub_version: int = 0
    tags: set[str] = field(default_factory=set)
    codes: frozenset[int] | None = None  # None: every message matches

    @classmethod
    def parse(cls, topic: str, expression: str | None, expression_type: str | None = None,
              sub_version: int = 0) -> Subscription:
        expression = (expression or "").strip()
        kind = (expression_type or EXPRESSION_TAG).upper()
        sub = cls(topic, expression or SUB_ALL, kind, sub_version)
        if kind == EXPRESSION_TAG and expression and expression != SUB_ALL:
            sub.tags = {t.strip() for t in expression.split("||") if t.strip()}
            sub.codes = frozenset(tags_code(t) for t in sub.tags) if sub.tags else None
        return sub

    @property
    def matches_all(self) -> bool:
        return self.codes is None

    def matches_tags(self, tags: str | None) -> bool:
        """The client-side check: exact tag strings (hash collisions filtered out)."""
        if self.codes is None:
            return True
        return tags is not None and tags in self.tags

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "subString": self.expression,
                "tagsSet": sorted(self.tags),
                "codeSet": sorted(tags_code(t) for t in self.tags),
                "subVersion": self.sub_version, "expressionType": self.expression_type,
                "classFilterMode": False}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Subscription:
        """From a heartbeat's SubscriptionData. Tag codes are recomputed from the tags, since
        the C++ client sends garbage codes."""
        version = data.get("subVersion", 0)
        try:
            version = int(version)
        except (TypeError, ValueError, OverflowError):
            version = 0
        if not -(1 << 63) <= version < 1 << 63:  # a Java long, written out again later
            version = 0
        expression, kind = data.get("subString"), data.get("expressionType")
        return cls.parse(str(data.get("topic", "")),
                         expression if expression is None else str(expression),
                         kind if kind is None else str(kind), version)
