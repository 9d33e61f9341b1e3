"""Logging of every unary gRPC request and response (verbosity >= fakeplugin.logs.GRPC_TRACE_LEVEL)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

log = logging.getLogger(__name__)


def _text(message: Message) -> str:
    return text_format.MessageToString(message, as_one_line=True) or "{}"


class TraceInterceptor(grpc.ServerInterceptor):
    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method
        behavior = handler.unary_unary

        def traced(request: Message, context: grpc.ServicerContext) -> Any:
            log.debug("%s request: %s", method, _text(request))
            try:
                response = behavior(request, context)
            except BaseException as exc:
                log.debug("%s failed: %r", method, exc)
                raise
            log.debug("%s response: %s", method, _text(response))
            return response

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
