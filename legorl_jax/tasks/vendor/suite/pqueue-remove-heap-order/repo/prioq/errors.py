"""Exceptions raised by prioq."""


class EmptyQueueError(IndexError):
    """pop() or peek() on an empty queue."""


class DuplicateItemError(ValueError):
    """push() of an item that is already queued."""
