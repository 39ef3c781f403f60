"""One module per Kafka API. Each declares API_KEY, MIN_VERSION, MAX_VERSION and `async handle(ctx, request)`.

The version ranges here are exactly what ApiVersions advertises: only versions that are implemented
and exercised by the tests with real clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kio.index import api_key_map

from . import (
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sync_group,
)

if TYPE_CHECKING:
    from logbus.broker.broker import Broker


@dataclass
class RequestContext:
    broker: "Broker"
    header: Any
    api_version: int
    peer: object


@dataclass(frozen=True)
class HandlerEntry:
    name: str
    min_version: int
    max_version: int
    handle: Callable[[RequestContext, Any], Awaitable[Any]]


def _entry(module: ModuleType) -> tuple[int, HandlerEntry]:
    return module.API_KEY, HandlerEntry(api_key_map[module.API_KEY], module.MIN_VERSION, module.MAX_VERSION, module.handle)


HANDLERS: dict[int, HandlerEntry] = dict(
    _entry(m)
    for m in (
        produce,
        fetch,
        list_offsets,
        metadata,
        api_versions,
        create_topics,
        delete_topics,
        create_partitions,
        describe_configs,
        alter_configs,
        incremental_alter_configs,
        describe_cluster,
        find_coordinator,
        join_group,
        sync_group,
        heartbeat,
        leave_group,
        offset_commit,
        offset_fetch,
        list_groups,
        describe_groups,
        delete_groups,
        offset_delete,
        init_producer_id,
        offset_for_leader_epoch,
        elect_leaders,
    )
)
