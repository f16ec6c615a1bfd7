"""Ring buffers and the stream tools built on them."""

from ringlog.buffer import RingBuffer
from ringlog.tail import LogTail
from ringlog.window import SlidingWindow

__all__ = ["LogTail", "RingBuffer", "SlidingWindow"]
__version__ = "0.9.0"
