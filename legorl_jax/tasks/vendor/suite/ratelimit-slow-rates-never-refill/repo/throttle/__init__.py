"""Token-bucket rate limiting."""

from throttle.bucket import TokenBucket
from throttle.clock import ManualClock, MonotonicClock
from throttle.limiter import Decision, RateLimited, RateLimiter
from throttle.rate import Rate, parse_rate

__all__ = ["Decision", "ManualClock", "MonotonicClock", "RateLimited", "RateLimiter", "Rate",
           "TokenBucket", "parse_rate"]
__version__ = "0.5.3"
