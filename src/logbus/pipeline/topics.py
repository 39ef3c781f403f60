"""Topic names and the reading rules across data centres (shared/DESIGN.md).

A logical topic `tenant/namespace/topic` is stored as the physical topic `{dc}.{tenant}.{namespace}.{topic}`;
the prefix names the data centre where the data entered. A reader in a data centre with its own cluster
reads every prefix there (the mirrors bring the others); a reader without one reads each prefix from the
cluster of the data centre where it originated, because offsets differ between clusters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = re.compile(r"^(\*|[A-Za-z0-9_-]+)$")


@dataclass(frozen=True)
class LogicalTopic:
    tenant: str
    namespace: str
    topic: str

    @classmethod
    def parse(cls, text: str) -> "LogicalTopic":
        parts = text.strip().strip("/").split("/")
        if len(parts) != 3 or not all(_PART.match(p) for p in parts):
            raise ValueError(
                f"logical topic must be tenant/namespace/topic (letters, digits, '_' or '-', or '*'), not {text!r}"
            )
        return cls(*parts)

    def pattern(self, prefixes: list[str] | None) -> str:
        """Regular expression of the physical topics of this logical topic under the given DC prefixes (None: any)."""
        dc = "[A-Za-z0-9_-]+" if not prefixes else "(?:" + "|".join(re.escape(p) for p in prefixes) + ")"
        parts = ["[A-Za-z0-9_-]+" if p == "*" else re.escape(p) for p in (self.tenant, self.namespace, self.topic)]
        return "^" + dc + r"\." + r"\.".join(parts) + "$"

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.topic}"


def physical_name(dc: str, logical: LogicalTopic) -> str:
    return f"{dc}.{logical.tenant}.{logical.namespace}.{logical.topic}"


def split_physical(name: str) -> tuple[str, LogicalTopic] | None:
    """`dc1.t.n.x` -> ("dc1", t/n/x); None for names that are not DC-prefixed logical topics."""
    parts = name.split(".")
    if len(parts) != 4 or not all(parts):
        return None
    return parts[0], LogicalTopic(parts[1], parts[2], parts[3])


def logical_topics_pattern(topics: list[str], prefixes: list[str] | None) -> str:
    """One regular expression matching every physical topic of the logical topics under the prefixes."""
    logical = [LogicalTopic.parse(t) for t in topics]
    if not logical:
        raise ValueError("no logical topics given")
    return "|".join("(?:" + lt.pattern(prefixes) + ")" for lt in logical)


@dataclass(frozen=True)
class ClusterRead:
    """Read these DC prefixes of the logical topics from this cluster."""

    dc: str
    bootstrap_servers: str
    prefixes: list[str] | None  # None: every prefix

    def pattern(self, topics: list[str]) -> str:
        return logical_topics_pattern(topics, self.prefixes)


def plan_reads(clusters: dict[str, str], local_dc: str | None) -> list[ClusterRead]:
    """The reading rule: the local cluster for every prefix if there is one, else each prefix at its origin."""
    if not clusters:
        raise ValueError("no clusters given")
    for dc in clusters:
        if not _PART.match(dc) or dc == "*":
            raise ValueError(f"data centre names are letters, digits, '_' or '-', not {dc!r}")
    if local_dc is not None and local_dc in clusters:
        return [ClusterRead(local_dc, clusters[local_dc], None)]
    return [ClusterRead(dc, servers, [dc]) for dc, servers in sorted(clusters.items())]
