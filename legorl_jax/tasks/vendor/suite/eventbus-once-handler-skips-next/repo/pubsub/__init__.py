"""A synchronous in-process event bus."""

from pubsub.bus import EventBus
from pubsub.errors import DeliveryError
from pubsub.event import Event
from pubsub.history import History
from pubsub.subscription import Subscription
from pubsub.topics import matches, validate_pattern

__all__ = ["DeliveryError", "Event", "EventBus", "History", "Subscription", "matches",
           "validate_pattern"]
__version__ = "1.0.4"
