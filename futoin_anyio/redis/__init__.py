"""Limits that hold across processes and hosts: :class:`RedisMutex`, :class:`RedisThrottle`
and :class:`RedisLimiter` keep their state in Redis (extra ``[redis]``, on coredis >= 6).

Each is an ISync (``asi.sync(obj, step)``) and an async context manager for plain tasks, like
its local counterpart; every process that uses the same Redis server and name shares one limit.
Create one object per limit and process and share it: each keeps a background task in the
client's task group while the client is entered.
"""

from ._primitives import RedisLimiter as RedisLimiter
from ._primitives import RedisLimiterStatistics as RedisLimiterStatistics
from ._primitives import RedisMutex as RedisMutex
from ._primitives import RedisMutexStatistics as RedisMutexStatistics
from ._primitives import RedisThrottle as RedisThrottle
from ._primitives import RedisThrottleStatistics as RedisThrottleStatistics

__all__ = (
    "RedisLimiter",
    "RedisLimiterStatistics",
    "RedisMutex",
    "RedisMutexStatistics",
    "RedisThrottle",
    "RedisThrottleStatistics",
)
