"""The broker's domain core: vhosts, exchanges and queues by name, users, publish path.

Synchronous and clock-free; the network shell drives it (see ``core`` for the hand-off points) and
``delivery`` owns each message's life.
"""

from . import errors
from .core import Broker, BrokerObserver
from .limits import Limits
from .delivery import Delivery, PublishResult, Settle
from .vhost import PREDECLARED, VHost

__all__ = ["PREDECLARED", "Broker", "BrokerObserver", "Delivery", "Limits", "PublishResult", "Settle", "VHost",
           "errors"]
