"""The gateway store's contract, run against both backends: SQLite in a temporary directory and ZooKeeper (a real
server, a fresh chroot per test). Every store is opened through `open_store`, as the gateway does; concurrent
callers each get their own store object, as gateway processes do."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from zkserver import zookeeper  # noqa: F401 - the fixture

from logbus.gateway.store import GatewayRecord, GatewayStore, Owner, Pin, PushRecord, TopicRecord, open_store

TOPIC = "dc1.acme.logs.web"
AWKWARD = ["host-1/var/log/app.log", "журнал приложения", "with space", "/leading/and/trailing/", ".", "..", "%41",
           "a%2Fb", "emoji 🚀", "x" * 300]


@pytest.fixture(params=["sqlite", "zk"])
def make_store(request, tmp_path):
    """make_store() -> a new store object on this test's shared state."""
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path / 'gateway.db'}"
    else:
        url = f"zk://{request.getfixturevalue('zookeeper')}/gw-contract-{uuid.uuid4().hex[:8]}"
    opened: list[GatewayStore] = []

    def make() -> GatewayStore:
        s = open_store(url)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store) -> GatewayStore:
    return make_store()


def in_threads(n: int, make_store: Callable[[], GatewayStore], fn: Callable[[GatewayStore, int], object]) -> list:
    """Runs fn(own store, i) in n threads released at once; their results in order of i."""
    stores = [make_store() for _ in range(n)]
    results: list = [None] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(stores[i], i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def topic_rec(tenant: str, namespace: str, name: str, partitions: int = 4) -> TopicRecord:
    return TopicRecord(tenant, namespace, name, f"dc1.{tenant}.{namespace}.{name}", partitions, 3, None, 1700000000000)


# --- registry ---------------------------------------------------------------------------------------------------

def test_tenants_and_tokens(store):
    assert not store.tenant_exists("acme")
    assert store.create_tenant("acme") is True
    assert store.create_tenant("acme") is False
    assert store.tenant_exists("acme") and not store.tenant_exists("globex")
    h1, h2 = "a" * 64, "b" * 64
    store.add_token("acme", h1)
    store.add_token("acme", h2)
    assert store.token_tenant(h1) == "acme" and store.token_tenant(h2) == "acme"
    assert store.token_tenant("c" * 64) is None


def test_namespaces_and_topics(store):
    store.create_tenant("acme")
    store.create_tenant("globex")
    assert store.namespaces("acme") == []
    assert store.create_namespace("acme", "logs") is True
    assert store.create_namespace("acme", "logs") is False
    assert store.create_namespace("acme", "audit") is True
    assert store.create_namespace("globex", "logs") is True
    assert store.namespaces("acme") == ["audit", "logs"]
    assert store.namespaces("globex") == ["logs"]

    assert store.topics("acme") == [] and store.topic("acme", "logs", "web") is None
    web = topic_rec("acme", "logs", "web")
    assert store.create_topic(web) is True
    assert store.create_topic(topic_rec("acme", "logs", "web", partitions=9)) is False
    assert store.topic("acme", "logs", "web") == web  # the first one stays
    api = TopicRecord("acme", "logs", "api", "dc1.acme.logs.api", 2, 1, '{"version":1}', 1700000000001)
    trail = topic_rec("acme", "audit", "trail")
    other = topic_rec("globex", "logs", "web")
    for rec in (api, trail, other):
        assert store.create_topic(rec)
    assert store.topics("acme") == [trail, api, web]  # by namespace, then name
    assert store.topics("globex") == [other]
    assert store.topic("acme", "logs", "api").logical == "acme/logs/api"


# --- gateways and ownership -------------------------------------------------------------------------------------

def test_gateways_heartbeat_and_a_stale_incarnation(store):
    assert store.gateway("gw-a") is None
    assert store.heartbeat("gw-a", "inc-1", 1000) is False  # never registered
    store.register_gateway(GatewayRecord("gw-a", "inc-1", "http://a:1", 1000))
    assert store.heartbeat("gw-a", "inc-1", 2000) is True
    assert store.gateway("gw-a") == GatewayRecord("gw-a", "inc-1", "http://a:1", 2000)
    # the process restarts: a new incarnation replaces the registration
    store.register_gateway(GatewayRecord("gw-a", "inc-2", "http://a:2", 3000))
    assert store.heartbeat("gw-a", "inc-1", 4000) is False
    assert store.gateway("gw-a") == GatewayRecord("gw-a", "inc-2", "http://a:2", 3000)
    assert store.heartbeat("gw-a", "inc-2", 5000) is True
    assert store.gateway("gw-a").heartbeat_ms == 5000


def test_gateways_lists_every_registration(store):
    assert store.gateways() == []
    store.register_gateway(GatewayRecord("host-1/w1", "inc-b", "http://b:1", 1000))  # any name, '/' included
    store.register_gateway(GatewayRecord("gw-a", "inc-a", "http://a:1", 2000))
    assert store.heartbeat("gw-a", "inc-a", 3000) is True
    assert store.gateways() == [GatewayRecord("gw-a", "inc-a", "http://a:1", 3000),
                                GatewayRecord("host-1/w1", "inc-b", "http://b:1", 1000)]


def test_take_ownership_bumps_the_generation(store):
    assert store.owner(TOPIC, "x") is None
    assert store.take_ownership(TOPIC, "x", "gw-a", "inc-a") == (1, None)
    assert store.take_ownership(TOPIC, "x", "gw-b", "inc-b") == (2, Owner(1, "gw-a", "inc-a"))
    assert store.take_ownership(TOPIC, "x", "gw-b", "inc-b") == (3, Owner(2, "gw-b", "inc-b"))
    assert store.owner(TOPIC, "x") == Owner(3, "gw-b", "inc-b")
    # per (topic, source)
    assert store.take_ownership(TOPIC, "y", "gw-a", "inc-a") == (1, None)
    assert store.take_ownership("dc1.acme.logs.api", "x", "gw-a", "inc-a") == (1, None)
    for i, source in enumerate(AWKWARD):
        assert store.take_ownership(TOPIC, source, "gw-a", f"inc-{i}") == (1, None)
    for i, source in enumerate(AWKWARD):
        assert store.owner(TOPIC, source) == Owner(1, "gw-a", f"inc-{i}")


def test_concurrent_take_ownership_gives_distinct_generations(make_store):
    threads, rounds = 6, 5

    def take(s: GatewayStore, i: int) -> list[tuple[int, Owner | None]]:
        return [s.take_ownership(TOPIC, "host-1/var/log/app.log", f"gw-{i}", f"inc-{i}") for _ in range(rounds)]

    results = in_threads(threads, make_store, take)
    generations = sorted(g for per in results for g, _ in per)
    assert generations == list(range(1, threads * rounds + 1))
    # each answer's previous owner is whoever held the generation just below it
    holder = {g: Owner(g, f"gw-{i}", f"inc-{i}") for i, per in enumerate(results) for g, _ in per}
    for per in results:
        for g, prev in per:
            assert prev == (holder[g - 1] if g > 1 else None)
    assert make_store().owner(TOPIC, "host-1/var/log/app.log") == holder[threads * rounds]


# --- pins -------------------------------------------------------------------------------------------------------

def test_pins_create_repin_and_fencing(store):
    assert store.pin(TOPIC, "x") is None
    assert store.create_pin(TOPIC, "x", 2) == Pin(2, 1, -1)
    assert store.create_pin(TOPIC, "x", 3) == Pin(2, 1, -1)  # the existing pin stays
    gen, _ = store.take_ownership(TOPIC, "x", "gw-a", "inc-a")
    assert store.repin(TOPIC, "x", 1, 0, 10, gen + 1) is None  # not the owner's generation
    assert store.repin(TOPIC, "x", 7, 0, 10, gen) is None  # not the current pin generation
    assert store.pin(TOPIC, "x") == Pin(2, 1, -1)
    assert store.repin(TOPIC, "x", 1, 0, 10, gen) == Pin(0, 2, 10)
    assert store.repin(TOPIC, "x", 2, 1, 4, gen) == Pin(1, 3, 10)  # base_seqno never goes down
    assert store.pin(TOPIC, "x") == Pin(1, 3, 10)
    newer, _ = store.take_ownership(TOPIC, "x", "gw-b", "inc-b")
    assert store.repin(TOPIC, "x", 3, 2, 20, gen) is None  # fenced by the newer session
    assert store.repin(TOPIC, "x", 3, 2, 20, newer) == Pin(2, 4, 20)
    # no pin, or no owner: nothing to re-pin
    store.take_ownership(TOPIC, "unpinned", "gw-a", "inc-a")
    assert store.repin(TOPIC, "unpinned", 1, 0, 0, 1) is None
    store.create_pin(TOPIC, "unowned", 0)
    assert store.repin(TOPIC, "unowned", 1, 1, 0, 1) is None


def test_pin_counts(store):
    assert store.pin_counts(TOPIC) == {}
    for i, source in enumerate(AWKWARD):
        assert store.create_pin(TOPIC, source, i % 3) == Pin(i % 3, 1, -1)
    store.create_pin("dc1.acme.logs.api", "other", 5)
    expected: dict[int, int] = {}
    for i in range(len(AWKWARD)):
        expected[i % 3] = expected.get(i % 3, 0) + 1
    assert store.pin_counts(TOPIC) == expected
    for i, source in enumerate(AWKWARD):
        assert store.pin(TOPIC, source) == Pin(i % 3, 1, -1)


def test_repin_race_has_exactly_one_winner(make_store):
    first = make_store()
    first.create_pin(TOPIC, "host-1/var/log/app.log", 0)
    gen, _ = first.take_ownership(TOPIC, "host-1/var/log/app.log", "gw-a", "inc-a")

    def repin(s: GatewayStore, i: int) -> Pin | None:
        return s.repin(TOPIC, "host-1/var/log/app.log", 1, i + 1, 100 + i, gen)

    results = in_threads(6, make_store, repin)
    winners = [(i, p) for i, p in enumerate(results) if p is not None]
    assert len(winners) == 1, results
    i, pin = winners[0]
    assert pin == Pin(i + 1, 2, 100 + i)
    assert first.pin(TOPIC, "host-1/var/log/app.log") == pin


# --- seqno index ------------------------------------------------------------------------------------------------

def test_index_round_trip_with_awkward_sources(store):
    assert store.index_position(TOPIC, 0) is None
    assert store.index_entry(TOPIC, 0, "x") is None
    assert store.index_lookup(TOPIC, 0, "x") == (0, None)
    entries = {source: (i * 10, i * 100) for i, source in enumerate(AWKWARD)}
    store.save_index(TOPIC, 0, 500, entries)
    assert store.index_position(TOPIC, 0) == 500
    for source, entry in entries.items():
        assert store.index_entry(TOPIC, 0, source) == entry
        assert store.index_lookup(TOPIC, 0, source) == (500, entry)
    assert store.index_lookup(TOPIC, 0, "unknown") == (500, None)
    assert store.index_position(TOPIC, 1) is None  # per partition
    assert store.index_lookup("dc1.acme.logs.api", 0, "host-1/var/log/app.log") == (0, None)


def test_save_index_merges_higher_seqnos_and_the_position_only_grows(store):
    store.save_index(TOPIC, 0, 100, {"a": (5, 50), "b": (7, 70)})
    store.save_index(TOPIC, 0, 80, {"a": (3, 90), "b": (9, 95), "c": (1, 99)})
    assert store.index_position(TOPIC, 0) == 100
    assert store.index_entry(TOPIC, 0, "a") == (5, 50)  # a lower seqno does not replace a higher one
    assert store.index_entry(TOPIC, 0, "b") == (9, 95)
    assert store.index_entry(TOPIC, 0, "c") == (1, 99)
    store.save_index(TOPIC, 0, 200, {})
    assert store.index_lookup(TOPIC, 0, "b") == (200, (9, 95))


def test_concurrent_index_saves_lose_nothing(make_store):
    def save(s: GatewayStore, i: int) -> None:
        for j in range(5):
            s.save_index(TOPIC, 3, 10 * i + j, {f"host-{i}/app.log": (j, 10 * i + j)})

    in_threads(5, make_store, save)
    s = make_store()
    assert s.index_position(TOPIC, 3) == 44
    for i in range(5):
        assert s.index_entry(TOPIC, 3, f"host-{i}/app.log") == (4, 10 * i + 4)


# --- push subscriptions -----------------------------------------------------------------------------------------

def test_pushes_create_delete_list(store):
    assert store.pushes() == []
    p1 = PushRecord("p-b", "acme", "acme/logs/web", "lake", "http://sink/1", 1)
    p2 = PushRecord("p-a", "globex", "globex/logs/web", "lake", "http://sink/2", 2)
    assert store.create_push(p1) is True
    assert store.create_push(PushRecord("p-b", "acme", "acme/logs/web", "other", "http://sink/3", 3)) is False
    assert store.create_push(p2) is True
    assert store.pushes() == [p2, p1]  # by id
    assert store.delete_push("p-b") is True
    assert store.delete_push("p-b") is False
    assert store.delete_push("never") is False
    assert store.pushes() == [p2]


def test_state_is_shared_between_store_objects(make_store):
    a, b = make_store(), make_store()
    a.create_tenant("acme")
    a.take_ownership(TOPIC, "x", "gw-a", "inc-a")
    a.save_index(TOPIC, 0, 10, {"x": (3, 9)})
    assert b.tenant_exists("acme")
    assert b.take_ownership(TOPIC, "x", "gw-b", "inc-b") == (2, Owner(1, "gw-a", "inc-a"))
    assert b.index_lookup(TOPIC, 0, "x") == (10, (3, 9))
