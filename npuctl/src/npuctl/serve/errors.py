"""The one error every protocol of npuctl serve raises for an answer other than 2xx; each
protocol shapes it as its clients parse errors (.protocol.HttpApi.error_body)."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        param: str | None = None,
        kind: str = "invalid_request",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param
        self.kind = kind  # the metrics label
        self.headers = headers or {}
