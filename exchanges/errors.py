"""Routing errors; the broker maps them to AMQP reply codes."""

from __future__ import annotations

__all__ = ["ArgumentError", "ExchangeError", "OperationNotPermitted", "UnknownExchangeType"]


class ExchangeError(Exception):
    pass


class ArgumentError(ExchangeError):
    """Invalid binding or exchange arguments (406 PRECONDITION_FAILED)."""


class UnknownExchangeType(ExchangeError):
    """No such exchange type (503 COMMAND_INVALID)."""


class OperationNotPermitted(ExchangeError):
    """E.g. binding to the default exchange (403 ACCESS_REFUSED)."""
