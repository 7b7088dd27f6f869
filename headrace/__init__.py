"""headrace: an AMQP 0-9-1 message broker on trio.

Map: ``exchanges`` routes (pure), ``queues`` holds and dispatches messages (pure),
``persistence`` owns files (sync I/O), ``server.amqp`` is the sans-IO protocol,
``server.broker``/``server.session`` apply protocol events to the domain, ``server.net`` and
``server.app`` are the only trio code, ``cli`` is the command line and ``spark_bridge`` reads
mirrored exchanges with PySpark.
"""

__version__ = "0.1.0"
