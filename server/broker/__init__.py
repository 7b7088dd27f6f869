"""The broker's domain core: vhosts, exchanges and queues by name, users, publish path.

Synchronous and clock-free; the network shell drives it (see ``core`` for the hand-off points).
"""

from . import errors
from .core import Broker, BrokerObserver, Limits
from .vhost import PREDECLARED, PublishResult, VHost

__all__ = ["PREDECLARED", "Broker", "BrokerObserver", "Limits", "PublishResult", "VHost", "errors"]
