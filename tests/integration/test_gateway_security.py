"""Tenants, tokens and bad input: every refusal is a JSON {error, message} with the right status, and nothing is
written to the bus (checked by reading the topics afterwards). TLS when configured."""

from __future__ import annotations

import ssl
import subprocess

import aiohttp
from gatewayproc import ADMIN, Api, gateway_factory, read_topic, run  # noqa: F401  (fixture)


def _is_error(status: int, body, want_status: int, want_error: str | None = None) -> bool:
    ok = status == want_status and isinstance(body, dict) and set(body) == {"error", "message"} and body["message"]
    return ok and (want_error is None or body["error"] == want_error)


def test_tokens_tenants_and_bad_input_write_nothing(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap, settings={"max_chunk_bytes": 1000})

    async def scenario():
        async with aiohttp.ClientSession() as http:
            admin = Api(http, gw.url)
            acme = await admin.setup_topic("acme", "logs", "web", partitions=2)
            other = await admin.setup_topic("globex", "logs", "web", partitions=1)
            api = Api(http, gw.url, acme)
            checks = []

            def expect(result, status, error=None, what=""):
                checks.append((what, result[0], result[1], _is_error(result[0], result[1], status, error)))

            # 401: no token, a wrong token
            expect(await api.call("POST", "/v1/sessions", {"topic": "acme/logs/web", "source_id": "s"}, token=""), 401, "unauthorized", "no token")
            expect(await api.call("POST", "/v1/sessions", {"topic": "acme/logs/web", "source_id": "s"}, token="lbt_wrong"), 401, "unauthorized", "wrong token")
            expect(await api.call("POST", "/v1/write", {"topic": "acme/logs/web", "data": "x"}, token="lbt_wrong"), 401, "unauthorized", "wrong token, sourceless")
            # 403: another tenant's namespaces and topics, and tenant creation by a tenant
            expect(await api.call("POST", "/v1/sessions", {"topic": "globex/logs/web", "source_id": "s"}), 403, "forbidden", "other tenant session")
            expect(await api.call("POST", "/v1/write", {"topic": "globex/logs/web", "data": "x"}), 403, "forbidden", "other tenant write")
            expect(await api.call("POST", "/v1/store", {"topic": "globex/logs/web", "data": "x"}), 403, "forbidden", "other tenant store")
            expect(await api.call("POST", "/v1/tenants/globex/namespaces", {"name": "mine"}), 403, "forbidden", "other tenant namespace")
            expect(await api.call("GET", "/v1/topics/globex/logs/web/partitions/0/records"), 403, "forbidden", "other tenant read")
            expect(await api.call("POST", "/v1/topics", {"topic": "globex/logs/new"}), 403, "forbidden", "other tenant topic")
            expect(await api.call("POST", "/v1/tenants", {"name": "evil"}), 403, "forbidden", "tenant creates tenant")
            # 400: malformed JSON
            expect(await api.call("POST", "/v1/sessions", raw=b'{"topic": "acme/logs/web", '), 400, "bad_request", "malformed JSON")
            expect(await api.call("POST", "/v1/write", raw=b"[1, 2"), 400, "bad_request", "malformed JSON, sourceless")
            # 404: unknown topic, namespace, session
            expect(await api.call("POST", "/v1/sessions", {"topic": "acme/logs/nope", "source_id": "s"}), 404, "unknown_topic", "unknown topic")
            expect(await api.call("POST", "/v1/write", {"topic": "acme/nope/web", "data": "x"}), 404, "unknown_topic", "unknown namespace")
            expect(await api.call("POST", "/v1/sessions/nosuch/write", {"seqno": 1, "data": "x"}), 404, "unknown_session", "unknown session")
            expect(await api.call("POST", "/v1/topics", {"topic": "acme/nope/t"}), 404, "unknown_namespace", "topic in unknown namespace")
            # 422: wrong types and values
            expect(await api.call("POST", "/v1/sessions", {"topic": "acme/logs/web"}), 422, "invalid", "no source id")
            expect(await api.call("POST", "/v1/sessions", {"topic": "acme/web", "source_id": "s"}), 422, "invalid", "bad topic name")
            s = await api.ok("POST", "/v1/sessions", {"topic": "acme/logs/web", "source_id": "src-1"})
            w = f"/v1/sessions/{s['session_id']}/write"
            expect(await api.call("POST", w, {"seqno": "3", "data": "x"}), 422, "invalid", "seqno as string")
            expect(await api.call("POST", w, {"seqno": -1, "data": "x"}), 422, "invalid", "negative seqno")
            expect(await api.call("POST", w, {"seqno": 1, "data_b64": "!!"}), 422, "invalid", "bad base64")
            expect(await api.call("POST", w, raw=b"{nope"), 400, "bad_request", "malformed chunk JSON")
            # 413: an oversized chunk, alone or in a batch with good ones: nothing of the batch is written
            expect(await api.call("POST", w, {"seqno": 1, "data": "x" * 1001}), 413, "chunk_too_large", "oversized chunk")
            expect(await api.call("POST", w, {"chunks": [{"seqno": 1, "data": "ok"}, {"seqno": 2, "data": "x" * 1001}]}), 413, "chunk_too_large", "oversized in batch")
            expect(await api.call("POST", "/v1/store", {"topic": "acme/logs/web", "data": "x" * 1001}), 413, "chunk_too_large", "oversized store")
            expect(await api.call("POST", w, raw=b'{"seqno": 1, "data": "' + b"y" * (9 * 1024 * 1024) + b'"}'), 413, None, "oversized body")
            # a session of another tenant's token
            expect(await api.call("POST", w, {"seqno": 1, "data": "x"}, token=other), 403, "forbidden", "other tenant's session")
            # seqnos going backwards are skipped, not written
            r = await api.ok("POST", w, {"chunks": [{"seqno": 10, "data": "ten"}, {"seqno": 9, "data": "nine"}, {"seqno": 10, "data": "again"}]})
            assert [x["status"] for x in r["results"]] == ["written", "skipped", "skipped"]
            # the gateway-to-gateway call needs the administrator token
            expect(await api.call("POST", "/internal/v1/release", {"topic": "t", "source": "s", "generation": 1, "incarnation": "x"}), 401, "unauthorized", "internal call")
            # the process keeps serving
            assert (await admin.ok("GET", "/healthz"))["status"] == "ok"
            return checks

    checks = run(scenario())
    bad = [c for c in checks if not c[3]]
    assert bad == [], bad
    recs = read_topic(broker.bootstrap, "dc1.acme.logs.web")
    assert [(h["lb.source"], h["lb.seqno"], v) for _, _, h, v in recs] == [("src-1", "10", b"ten")]
    assert read_topic(broker.bootstrap, "dc1.globex.logs.web") == []


def test_tls_serves_https_only(broker, gateway_factory, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    gw = gateway_factory(broker.bootstrap, settings={"tls_cert": str(cert), "tls_key": str(key)})

    async def scenario():
        ctx = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as https:
            api = Api(https, gw.url)
            token = await api.setup_topic("acme", "logs", "web", partitions=1)
            s = await Api(https, gw.url, token).ok("POST", "/v1/sessions", {"topic": "acme/logs/web", "source_id": "tls"})
            assert s["last_seqno"] is None
        async with aiohttp.ClientSession() as plain:
            try:
                await Api(plain, gw.url.replace("https", "http"), ADMIN).call("GET", "/healthz", timeout=5)
            except (aiohttp.ClientError, ConnectionError):
                return True
            return False

    assert run(scenario()), "plain HTTP must not be served when TLS is configured"
