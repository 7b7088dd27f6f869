"""Every AMQP 0-9-1 method (with RabbitMQ's extensions) and the generic codec, in one namespace:
``from headrace.server.amqp import methods as m`` then ``m.BasicPublish``, ``m.encode_method``.

The classes live in one module per group of spec classes; each field is declared once, as a
dataclass field annotated with its wire kind, and ``method_codec`` builds the codec from that.
"""

from __future__ import annotations

from .method_codec import METHODS, Method, decode_method, encode_method
from .methods_basic import *  # noqa: F403
from .methods_basic import __all__ as _basic
from .methods_connection import *  # noqa: F403
from .methods_connection import __all__ as _connection
from .methods_exchange_queue import *  # noqa: F403
from .methods_exchange_queue import __all__ as _exchange_queue

__all__ = ["METHODS", "Method", "decode_method", "encode_method", *_connection, *_exchange_queue, *_basic]
