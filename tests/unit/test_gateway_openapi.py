"""The hand-written OpenAPI document describes every route of the gateway's application, and nothing else."""

from __future__ import annotations

import pytest

from logbus.gateway.config import GatewayConfig
from logbus.gateway.openapi import openapi_document
from logbus.gateway.server import Gateway


def _routes() -> set[tuple[str, str]]:
    app = Gateway(GatewayConfig()).make_app()
    out = set()
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        out.add((route.resource.canonical, route.method.lower()))
    return out


def test_every_route_is_in_the_document_and_every_path_is_a_route():
    doc = openapi_document(GatewayConfig())
    described = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    routes = _routes()
    assert routes - described == set(), f"routes missing from openapi.json: {sorted(routes - described)}"
    assert described - routes == set(), f"openapi.json describes routes that do not exist: {sorted(described - routes)}"


def test_every_operation_has_responses_and_error_bodies_use_the_error_schema():
    doc = openapi_document(GatewayConfig())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (path, method)
            for status, resp in op["responses"].items():
                if int(status) >= 400:
                    assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_config_layers_and_validation(tmp_path):
    toml = tmp_path / "gw.toml"
    toml.write_text('listen = "0.0.0.0:9000"\ndc = "eu1"\nlease_ms = 40000\n[producer_config]\n"batch.num.messages" = 1000\n')
    c = GatewayConfig.load(toml, env={"LOGBUS_GATEWAY_DC": "us2", "LOGBUS_GATEWAY_DELIVERY_TIMEOUT_MS": "9000"}, listen="127.0.0.1:1")
    assert (c.listen, c.dc, c.lease_ms, c.delivery_timeout_ms) == ("127.0.0.1:1", "us2", 40000, 9000)
    assert c.producer_config == {"batch.num.messages": 1000}
    for bad in ({"nope": 1}, {"delivery_timeout_ms": 20000}, {"dc": "a.b"}, {"tls_cert": "x"}, {"listen": "nohost"},
                {"workers": 0}):
        try:
            GatewayConfig.load(None, env={}, **bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} was accepted")


def test_a_worker_is_a_gateway_of_its_own_that_shares_store_address_and_transactions(tmp_path):
    c = GatewayConfig.load(None, env={"LOGBUS_GATEWAY_WORKERS": "3"}, data_dir=str(tmp_path / "gw"), gateway_id="edge-1")
    assert c.workers == 3
    w = c.for_worker(2)
    assert (w.id, w.data_dir, w.workers) == ("edge-1-w2", tmp_path / "gw" / "worker-2", 1)
    assert w.store_url == c.store_url == f"sqlite://{(tmp_path / 'gw').resolve() / 'gateway.db'}"
    assert w.txn_root == c.txn_root == tmp_path / "gw" / "txn"
    assert w.listen == c.listen


def test_one_process_per_data_directory(tmp_path):
    c = GatewayConfig.load(None, env={}, data_dir=str(tmp_path / "gw"))
    held = c.lock_data_dir()
    try:
        with pytest.raises(RuntimeError, match="another gateway process uses"):
            c.lock_data_dir()
    finally:
        held.close()
    c.lock_data_dir().close()   # free again once the holder closed it
