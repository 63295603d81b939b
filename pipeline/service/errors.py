"""OpenAI-shaped HTTP errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations


class ApiError(Exception):
    """An error the service answers with ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return {
            "error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.code}
        }


def not_found(kind: str, object_id: str, param: str | None = None) -> ApiError:
    return ApiError(404, f"No {kind} found with id '{object_id}'.", param=param, code=f"{kind}_not_found")


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
