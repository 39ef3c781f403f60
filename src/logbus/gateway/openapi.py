"""The OpenAPI 3 document of the gateway, written by hand to match the handlers in `server.py`
(tests check that every route is described). Served at GET /openapi.json."""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str = "") -> dict:
    return {"description": description or "OK", "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict:
    words = {400: "malformed request (bad JSON)", 401: "missing or unknown bearer token",
             403: "the token's tenant may not do this", 404: "unknown tenant, namespace, topic, session or transaction",
             409: "conflict: exists already, fenced by a newer session, or wrong transaction state",
             410: "that gateway process is gone", 413: "chunk or body too large",
             422: "a field is missing or has a wrong type or value",
             503: "not written: the cluster, the store, a previous owner or the gateway holding the session is unavailable; retry"}
    return {str(c): {"description": words[c], "content": {"application/json": {"schema": _ref("Error")}}} for c in codes}


def _body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _path_params(*names: str) -> list[dict]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "integer" if n == "partition" else "string"}} for n in names]


def _query(name: str, description: str, typ: str = "integer") -> dict:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": {"type": typ}}


def _obj(props: dict, required: list[str] | None = None) -> dict:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


S = {"type": "string"}
I = {"type": "integer"}

SCHEMAS = {
    "Error": _obj({"error": S, "message": S}, ["error", "message"]),
    "Topic": _obj({"topic": S, "physical_topic": S, "partitions": I, "replication_factor": I,
                   "placement": {"type": "object", "nullable": True}}),
    "Chunk": _obj({"seqno": {"type": "integer", "minimum": 0}, "data": {"type": "string", "description": "UTF-8 text"},
                   "data_b64": {"type": "string", "description": "bytes, base64"},
                   "created": {"type": "integer", "description": "event time, ms since the epoch (default: now)"}}, ["seqno"]),
    "ChunkResult": _obj({"seqno": I, "status": {"type": "string", "enum": ["written", "skipped", "error"]},
                         "partition": I, "offset": I, "already_written": {"type": "boolean"}, "error": S, "message": S}),
    "SessionOpen": _obj({"topic": {"type": "string", "description": "tenant/namespace/topic"}, "source_id": S,
                         "host": S, "file": S, "type": S}, ["topic", "source_id"]),
    "Session": _obj({"session_id": S, "topic": S, "physical_topic": S, "source_id": S, "partition": I,
                     "pin_generation": I, "generation": I,
                     "last_seqno": {"type": "integer", "nullable": True, "description": "resume with seqnos above this"}}),
    "Record": _obj({"partition": I, "offset": I, "timestamp": I, "source": S, "seqno": I, "created": I, "host": S,
                    "file": S, "type": S, "origin": S, "txn": S, "data": S, "data_b64": S}),
    "Transaction": _obj({"txn_id": S, "topic": S, "state": {"type": "string", "enum": ["open", "requested", "committed", "aborted"]},
                         "chunks": I, "bytes": I, "partition": I, "first_offset": I, "last_offset": I, "commit_offset": I}),
    "Push": _obj({"push_id": S, "topic": S, "consumer": S, "url": S, "gateway": S, "status": {"type": "object", "nullable": True}}),
}


def openapi_document(config: Any = None) -> dict:
    auth = [{"bearer": []}]
    paths: dict[str, dict] = {
        "/healthz": {"get": {"summary": "Liveness and whether this gateway accepts writes", "security": [],
                             "responses": {"200": _json(_obj({"status": S, "gateway_id": S, "incarnation": S, "dc": S, "writable": {"type": "boolean"}}))}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "security": [],
                             "responses": {"200": {"description": "text exposition format", "content": {"text/plain": {"schema": S}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": _json({"type": "object"})}}},
        "/v1/tenants": {"post": {"summary": "Create a tenant (administrator); answers its first token", "security": auth,
                                 "requestBody": _body(_obj({"name": S}, ["name"])),
                                 "responses": {"201": _json(_obj({"tenant": S, "token": S})), **_errors(400, 401, 403, 409, 422)}}},
        "/v1/tenants/{tenant}/tokens": {"post": {"summary": "Create another bearer token of the tenant", "security": auth,
                                                 "parameters": _path_params("tenant"),
                                                 "responses": {"201": _json(_obj({"tenant": S, "token": S})), **_errors(401, 403, 404)}}},
        "/v1/tenants/{tenant}/namespaces": {
            "post": {"summary": "Create a namespace", "security": auth, "parameters": _path_params("tenant"),
                     "requestBody": _body(_obj({"name": S}, ["name"])),
                     "responses": {"201": _json(_obj({"tenant": S, "namespace": S})), **_errors(400, 401, 403, 404, 409, 422)}},
            "get": {"summary": "List namespaces", "security": auth, "parameters": _path_params("tenant"),
                    "responses": {"200": _json(_obj({"tenant": S, "namespaces": {"type": "array", "items": S}})), **_errors(401, 403, 404)}}},
        "/v1/tenants/{tenant}/topics": {"get": {"summary": "List the tenant's topics", "security": auth, "parameters": _path_params("tenant"),
                                                "responses": {"200": _json(_obj({"tenant": S, "topics": {"type": "array", "items": _ref("Topic")}})), **_errors(401, 403, 404)}}},
        "/v1/topics": {"post": {"summary": "Create a topic: the physical topic {dc}.{tenant}.{namespace}.{topic} in the cluster", "security": auth,
                                "requestBody": _body(_obj({"topic": S, "partitions": I, "replication_factor": I,
                                                           "placement": {"type": "object", "description": "Confluent placement JSON, set as confluent.placement.constraints"},
                                                           "config": {"type": "object", "additionalProperties": S}}, ["topic"])),
                                "responses": {"201": _json(_ref("Topic")), **_errors(400, 401, 403, 404, 409, 422)}}},
        "/v1/topics/{tenant}/{namespace}/{topic}": {"get": {"summary": "Describe a topic, with partition health", "security": auth,
                                                            "parameters": _path_params("tenant", "namespace", "topic"),
                                                            "responses": {"200": _json(_ref("Topic")), **_errors(401, 403, 404)}}},
        "/v1/topics/{tenant}/{namespace}/{topic}/partitions/{partition}/records": {"get": {
            "summary": "Pull records by partition and offset (batch-transaction rule applied)", "security": auth,
            "parameters": _path_params("tenant", "namespace", "topic", "partition") + [
                _query("offset", "first offset (default 0)"), _query("max_bytes", "byte limit (at least one record)"),
                _query("wait_ms", "long poll: wait this long for a record"), _query("dc", "read another data centre's prefix", "string"),
                _query("encoding", "base64: data always as data_b64", "string")],
            "responses": {"200": _json(_obj({"topic": S, "physical_topic": S, "partition": I, "records": {"type": "array", "items": _ref("Record")},
                                             "next_offset": I, "high_watermark": I})), **_errors(401, 403, 404, 422)}}},
        "/v1/sessions": {"post": {"summary": "Open a write session (fences older sessions of the source, recovers its last seqno)", "security": auth,
                                  "requestBody": _body(_ref("SessionOpen")),
                                  "responses": {"201": _json(_ref("Session")), **_errors(400, 401, 403, 404, 409, 422, 503)}}},
        "/v1/sessions/{session_id}/write": {"post": {
            "summary": "Write chunks (a chunk, or {chunks: [...]}); each answered written, skipped or error", "security": auth,
            "parameters": _path_params("session_id"),
            "requestBody": _body({"oneOf": [_ref("Chunk"), _obj({"chunks": {"type": "array", "items": _ref("Chunk")}}, ["chunks"])]}),
            "responses": {"200": _json(_obj({"session_id": S, "results": {"type": "array", "items": _ref("ChunkResult")}})),
                          **_errors(400, 401, 403, 404, 409, 413, 422, 503)}}},
        "/v1/sessions/{session_id}": {"delete": {"summary": "Close a write session", "security": auth, "parameters": _path_params("session_id"),
                                                 "responses": {"200": _json(_obj({"closed": {"type": "boolean"}})), **_errors(401, 403, 404)}}},
        "/v1/sessions/stream": {"get": {
            "summary": "WebSocket write session. First message: SessionOpen (JSON); answer {type: session, ...Session}. Then each "
                       "message is a Chunk, a list of Chunks, or a binary frame (4-byte big-endian header length, JSON header "
                       "{seqno, created}, data); answers in order {type: ack, results: [ChunkResult]}. An error is "
                       "{type: error, error, message}, then the socket closes with code 4000 + HTTP status mod 1000.",
            "security": auth, "responses": {"101": {"description": "switching to WebSocket"}, **_errors(401)}}},
        "/v1/write": {"post": {"summary": "Write records without a source (failover producer: any online partition)", "security": auth,
                               "requestBody": _body(_obj({"topic": S, "data": S, "data_b64": S, "host": S, "file": S, "type": S,
                                                          "records": {"type": "array", "items": _ref("Chunk")}}, ["topic"])),
                               "responses": {"200": _json(_obj({"results": {"type": "array", "items": _ref("ChunkResult")}})),
                                             **_errors(400, 401, 403, 404, 413, 422, 503)}}},
        "/v1/store": {"post": {"summary": "Batch transaction: keep a chunk in the gateway's durable temporary storage", "security": auth,
                               "requestBody": _body(_obj({"topic": S, "txn_id": S, "data": S, "data_b64": S, "source_id": S, "seqno": I,
                                                          "created": I, "host": S, "file": S, "type": S}, ["topic"])),
                               "responses": {"201": _json(_obj({"txn_id": S, "chunk": I, "state": S})), **_errors(400, 401, 403, 404, 409, 413, 422)}}},
        "/v1/commit_request": {"post": {"summary": "Batch transaction: write the stored chunks to the bus with lb.txn", "security": auth,
                                        "requestBody": _body(_obj({"txn_id": S}, ["txn_id"])),
                                        "responses": {"200": _json(_ref("Transaction")), **_errors(400, 401, 403, 404, 409, 422, 503)}}},
        "/v1/commit": {"post": {"summary": "Batch transaction: write the commit marker (lb.commit, lb.txn)", "security": auth,
                                "requestBody": _body(_obj({"txn_id": S}, ["txn_id"])),
                                "responses": {"200": _json(_ref("Transaction")), **_errors(400, 401, 403, 404, 409, 422, 503)}}},
        "/v1/transactions/{txn_id}": {
            "get": {"summary": "State of a batch transaction", "security": auth, "parameters": _path_params("txn_id"),
                    "responses": {"200": _json(_ref("Transaction")), **_errors(400, 401, 403, 404)}},
            "delete": {"summary": "Abort a batch transaction (drop its stored chunks)", "security": auth, "parameters": _path_params("txn_id"),
                       "responses": {"200": _json(_obj({"txn_id": S, "state": S})), **_errors(400, 401, 403, 404, 409)}}},
        "/v1/read-sessions": {"post": {"summary": "Open a read session for a consumer name (committed offsets: Kafka group lb.<tenant>.<consumer>)",
                                       "security": auth, "requestBody": _body(_obj({"topic": S, "consumer": S, "dc": S}, ["topic", "consumer"])),
                                       "responses": {"201": _json(_obj({"session_id": S, "consumer": S, "topic": S, "physical_topic": S,
                                                                        "offsets": {"type": "object", "additionalProperties": I}})),
                                                     **_errors(400, 401, 403, 404, 422)}}},
        "/v1/read-sessions/{session_id}/records": {"get": {
            "summary": "Next records of the read session", "security": auth,
            "parameters": _path_params("session_id") + [_query("max_bytes", "byte limit"), _query("wait_ms", "long poll"),
                                                         _query("encoding", "base64: data always as data_b64", "string")],
            "responses": {"200": _json(_obj({"session_id": S, "records": {"type": "array", "items": _ref("Record")},
                                             "offsets": {"type": "object", "additionalProperties": I}})), **_errors(401, 403, 404, 422)}}},
        "/v1/read-sessions/{session_id}/commit": {"post": {
            "summary": "Commit offsets (default: the session's positions)", "security": auth, "parameters": _path_params("session_id"),
            "requestBody": {"required": False, "content": {"application/json": {"schema": _obj({"offsets": {"type": "object", "additionalProperties": I}})}}},
            "responses": {"200": _json(_obj({"committed": {"type": "object", "additionalProperties": I}})), **_errors(400, 401, 403, 404, 422)}}},
        "/v1/read-sessions/{session_id}": {"delete": {"summary": "Close a read session", "security": auth, "parameters": _path_params("session_id"),
                                                      "responses": {"200": _json(_obj({"closed": {"type": "boolean"}})), **_errors(401, 403, 404)}}},
        "/v1/push": {
            "post": {"summary": "Create a push subscription: records are POSTed to url as JSON batches, with retries and backoff", "security": auth,
                     "requestBody": _body(_obj({"topic": S, "consumer": S, "url": S}, ["topic", "consumer", "url"])),
                     "responses": {"201": _json(_ref("Push")), **_errors(400, 401, 403, 404, 422)}},
            "get": {"summary": "List push subscriptions", "security": auth,
                    "responses": {"200": _json(_obj({"push": {"type": "array", "items": _ref("Push")}})), **_errors(401)}}},
        "/v1/push/{push_id}": {"delete": {"summary": "Delete a push subscription", "security": auth, "parameters": _path_params("push_id"),
                                          "responses": {"200": _json(_obj({"deleted": S})), **_errors(401, 403, 404)}}},
        "/internal/v1/release": {"post": {
            "summary": "Gateway to gateway: refuse writes of a source for generations below the given one and answer when none is in flight",
            "security": auth, "requestBody": _body(_obj({"topic": S, "source": S, "generation": I, "incarnation": S},
                                                        ["topic", "source", "generation", "incarnation"])),
            "responses": {"200": _json(_obj({"released": {"type": "boolean"}, "last_acked": {"type": "integer", "nullable": True}})),
                          **_errors(400, 401, 410, 422, 503)}}},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "logbus gateway", "version": "1",
                 "description": "Logbroker-style HTTP API over Kafka: write sessions with exactly-once seqnos, batch transactions, "
                                "and a read API. Errors are JSON {error, message}."},
        "servers": [{"url": config.url}] if config is not None else [],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": SCHEMAS},
        "security": auth,
        "paths": paths,
    }
