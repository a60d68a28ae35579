"""Helpers of the Redis tests: a real redis-server, and a worker process contending on a limit."""
