"""`make lint`: a class is not split across the modules of its package by inheritance.

A class that grew past a module's size is split into collaborators that each own their state
(ARCHITECTURE.md, "Who owns what"), not into a base class in one file and its subclass in another,
where a reader of either cannot tell what the object holds. So no class in the packages named on
the command line derives from a class defined in another module of the same package, except a
``Protocol``, an exception, or a base named in ``MEANT_AS_BASE`` (a record type many small classes
share, which holds no state of its own).

    python tests/lint/class_bases.py headrace.server.amqp headrace.server.session ...
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

# "module:Class": bases made to be derived from across modules
MEANT_AS_BASE = {
    "headrace.server.amqp.method_codec:Method",  # the record every AMQP method class is (methods_*.py)
}


def allowed(base: type) -> bool:
    return (issubclass(base, BaseException) or bool(getattr(base, "_is_protocol", False))
            or f"{base.__module__}:{base.__qualname__}" in MEANT_AS_BASE)


def faults(package: str) -> list[str]:
    found: list[str] = []
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, cls in vars(module).items():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            for base in cls.__bases__:
                home = base.__module__
                if home.startswith(package + ".") and home != module.__name__ and not allowed(base):
                    found.append(f"{module.__name__}.{name} derives from {home}.{base.__qualname__}")
    return found


def main() -> int:
    found = [fault for package in sys.argv[1:] for fault in faults(package)]
    for fault in found:
        print(fault)
    if found:
        print("split the class into collaborators that own their state (ARCHITECTURE.md, Who owns what)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
