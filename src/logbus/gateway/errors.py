"""Errors the HTTP API answers with: JSON `{"error": code, "message": text}` and an HTTP status."""

from __future__ import annotations


class GatewayError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict:
        return {"error": self.code, "message": self.message}


def bad_request(message: str) -> GatewayError:
    return GatewayError(400, "bad_request", message)


def invalid(message: str) -> GatewayError:
    return GatewayError(422, "invalid", message)


def not_found(message: str) -> GatewayError:
    return GatewayError(404, "not_found", message)
