from collections.abc import Callable, Sequence
from typing import TypeVar

from .mirror_frame import LogMessage

M = TypeVar("M", bound=LogMessage)
Row = tuple[int, str, bytes, bytes, bytes]
Framed = tuple[bytes, bytes, int, int, int, int, int]

def frame_rows(rows: Sequence[Row], start: int, offset: int, size: int, since: int, stamp: int, seg_max: int,
               interval: int) -> Framed: ...
def frame_messages(messages: Sequence[M], slow_row: Callable[[M], Row], start: int, offset: int, size: int,
                   since: int, stamp: int, seg_max: int, interval: int) -> Framed: ...
