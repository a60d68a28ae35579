"""The Lua scripts that change the shared state of a limit, each in one atomic step.

Keys of a limit named ``N`` share the hash tag ``{N}`` (one cluster slot): ``futoin:{N}:...``.
Queued and held entries are *tokens* ``<agent>.<n>``, where ``<agent>`` names the primitive
object (one per process) that waits for them. A waiter is let in by pushing its token to its
agent's signal list ``futoin:{N}:s:<agent>``, on which the agent blocks (``BLPOP``): the wake-up
is a push, never a poll. Every token has a lease (a sorted set scored by its expiry in the
server's clock, ``TIME``); expired tokens are dropped by the next script that runs, so a dead
process loses its permits and places. Empty sets vanish by themselves, so an idle limit leaves
no key behind.
"""

from __future__ import annotations

from typing import Final

__all__ = ()

_COMMON: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function signal(sigp, ttl, tok)
  local k = sigp .. string.match(tok, '^[^.]+')
  redis.call('RPUSH', k, tok)
  redis.call('PEXPIRE', k, ttl)
end
-- Whole keys expire a lease after the last change: a limit whose every process died leaves
-- nothing behind even when no other process comes to drop the expired tokens.
local function touch(ttl, a, b, c, d)
  for _, k in ipairs({a, b, c, d}) do redis.call('PEXPIRE', k, ttl) end
end
local function expire_queue(Q, QL)
  local dead = redis.call('ZRANGEBYSCORE', QL, '-inf', now)
  for _, tok in ipairs(dead) do
    redis.call('ZREM', Q, tok)
    redis.call('ZREM', QL, tok)
  end
end
"""

# -- Mutex: KEYS = holders (token -> expiry), queue (token -> arrival), queue leases, sequence --

_MUTEX: Final = _COMMON + """
local H, Q, QL, SEQ = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- The holders' key lives until its last lease ends (a key emptied and refilled has no TTL).
local function expire_holders()
  local last = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIRE', H, math.max(1, math.ceil(tonumber(last[2]) - now))) end
end
local function grant(max, sigp, ttl)
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  expire_queue(Q, QL)
  local free = max - redis.call('ZCARD', H)
  if free > 0 then
    for _, tok in ipairs(redis.call('ZRANGE', Q, 0, free - 1)) do
      redis.call('ZADD', H, redis.call('ZSCORE', QL, tok), tok)
      redis.call('ZREM', Q, tok)
      redis.call('ZREM', QL, tok)
      signal(sigp, ttl, tok)
    end
  end
  if redis.call('ZCARD', Q) == 0 then redis.call('DEL', SEQ) end
  expire_holders()
end
"""

_MUTEX_ENTER: Final = """
local function mutex_acquire(tok, max, maxq, lease, sigp)
  grant(max, sigp, lease)
  local held = redis.call('ZCARD', H)
  local qn = redis.call('ZCARD', Q)
  if qn == 0 and held < max then
    redis.call('ZADD', H, now + lease, tok)
    expire_holders()
    return {1, held + 1, 0}
  end
  if maxq >= 0 and qn >= maxq then return {-1, held, qn} end
  redis.call('ZADD', Q, redis.call('INCR', SEQ), tok)
  redis.call('ZADD', QL, now + lease, tok)
  touch(lease, Q, QL, SEQ, SEQ)
  expire_holders()
  return {0, held, qn + 1}
end
"""

#: ARGV: token, max, max_queue (-1: none), lease_ms, signal prefix.
#: Returns {1 entered | 0 queued | -1 rejected, holders, queued}.
MUTEX_ACQUIRE: Final = _MUTEX + _MUTEX_ENTER + """
return mutex_acquire(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
"""

#: ARGV: max, lease_ms, signal prefix, tokens... Each token leaves the queue or gives its
#: permit back (a token no longer known is skipped: leaving is idempotent, so a leave whose
#: reply was lost can be sent again). Returns {holders, queued}.
MUTEX_LEAVE: Final = _MUTEX + """
local max, lease, sigp = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i = 4, #ARGV do
  redis.call('ZREM', H, ARGV[i])
  redis.call('ZREM', Q, ARGV[i])
  redis.call('ZREM', QL, ARGV[i])
end
grant(max, sigp, lease)
expire_holders()
return {redis.call('ZCARD', H), redis.call('ZCARD', Q)}
"""

#: ARGV: max, lease_ms, signal prefix, tokens... Extends the leases of the tokens.
#: Returns {tokens no longer known, holders, queued}.
MUTEX_RENEW: Final = _MUTEX + """
local max, lease, sigp = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local missing = {}
for i = 4, #ARGV do
  local tok = ARGV[i]
  if redis.call('ZSCORE', H, tok) then
    redis.call('ZADD', H, now + lease, tok)
  elseif redis.call('ZSCORE', QL, tok) then
    redis.call('ZADD', QL, now + lease, tok)
  else
    missing[#missing + 1] = tok
  end
end
grant(max, sigp, lease)
touch(lease, Q, QL, SEQ, SEQ)
expire_holders()
return {missing, redis.call('ZCARD', H), redis.call('ZCARD', Q)}
"""

# -- Throttle: KEYS = queue, queue leases, sequence, period (hash: e = end, c = entries) --------

_THROTTLE_DEFS: Final = """
-- The end of the running period, after starting the next one (back to back while anyone
-- waits) and letting waiters in; nil when no period runs.
local function refresh(max, period, sigp, ttl)
  expire_queue(Q, QL)
  local e = tonumber(redis.call('HGET', P, 'e'))
  if e and now < e then return e end
  if redis.call('ZCARD', Q) == 0 then
    redis.call('DEL', P)
    redis.call('DEL', SEQ)
    return nil
  end
  local ne
  if e and now < e + period then ne = e + period else ne = now + period end
  local head = redis.call('ZRANGE', Q, 0, max - 1)
  for _, tok in ipairs(head) do
    redis.call('ZREM', Q, tok)
    redis.call('ZREM', QL, tok)
    signal(sigp, ttl, tok)
  end
  redis.call('HSET', P, 'e', ne, 'c', #head)
  redis.call('PEXPIRE', P, math.ceil(ne - now + period))
  if redis.call('ZCARD', Q) == 0 then redis.call('DEL', SEQ) end
  return ne
end
local function left(e)
  if e then return math.ceil(e - now) end
  return -1
end
local function count()
  return tonumber(redis.call('HGET', P, 'c') or '0')
end
"""

_THROTTLE_ENTER: Final = """
local function throttle_acquire(tok, max, maxq, period, lease, sigp)
  local e = refresh(max, period, sigp, lease)
  local qn = redis.call('ZCARD', Q)
  if qn == 0 then
    if not e then
      redis.call('HSET', P, 'e', now + period, 'c', 1)
      redis.call('PEXPIRE', P, math.ceil(2 * period))
      return {1, math.ceil(period), 1, 0}
    end
    local c = count()
    if c < max then
      redis.call('HINCRBY', P, 'c', 1)
      return {1, left(e), c + 1, 0}
    end
  end
  if maxq >= 0 and qn >= maxq then return {-1, left(e), count(), qn} end
  redis.call('ZADD', Q, redis.call('INCR', SEQ), tok)
  redis.call('ZADD', QL, now + lease, tok)
  touch(lease, Q, QL, SEQ, SEQ)
  return {0, left(e), count(), qn + 1}
end
"""

_THROTTLE: Final = _COMMON + """
local Q, QL, SEQ, P = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
""" + _THROTTLE_DEFS + _THROTTLE_ENTER

#: ARGV: token, max, max_queue (-1: none), period_ms, lease_ms, signal prefix.
#: Returns {1 entered | 0 queued | -1 rejected, ms left in the period, entries, queued}.
THROTTLE_ACQUIRE: Final = _THROTTLE + """
return throttle_acquire(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5]), ARGV[6])
"""

#: ARGV: max, period_ms, lease_ms, signal prefix. Starts the next period when one is over.
#: Returns {ms left in the period (-1: none runs), entries, queued}.
THROTTLE_TICK: Final = _THROTTLE + """
local max, period, lease, sigp = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local e = refresh(max, period, sigp, lease)
return {left(e), count(), redis.call('ZCARD', Q)}
"""

#: ARGV: tokens... Each leaves the queue (an entry let in counts for its period whatever it
#: does; a token no longer queued is skipped). Returns {queued}.
THROTTLE_LEAVE: Final = _THROTTLE + """
for i = 1, #ARGV do
  redis.call('ZREM', Q, ARGV[i])
  redis.call('ZREM', QL, ARGV[i])
end
local qn = redis.call('ZCARD', Q)
if qn == 0 then redis.call('DEL', SEQ) end
return {qn}
"""

#: ARGV: max, period_ms, lease_ms, signal prefix, tokens... Extends the queued tokens' leases.
#: Returns {tokens no longer queued, ms left in the period, entries, queued}.
THROTTLE_RENEW: Final = _THROTTLE + """
local max, period, lease, sigp = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local missing = {}
for i = 5, #ARGV do
  local tok = ARGV[i]
  if redis.call('ZSCORE', QL, tok) then
    redis.call('ZADD', QL, now + lease, tok)
  else
    missing[#missing + 1] = tok
  end
end
local e = refresh(max, period, sigp, lease)
touch(lease, Q, QL, SEQ, SEQ)
return {missing, left(e), count(), redis.call('ZCARD', Q)}
"""

# -- Limiter: a place (the Mutex's KEYS 1-4) and the rate (the Throttle's, KEYS 5-8) at once ---

#: ARGV: place token, concurrent, max_queue, rate token, rate, burst, period_ms, lease_ms,
#: signal prefix. Takes a place and, when it gets one, enters the rate or queues for it, in one
#: round trip; a rate queue found full gives the place back at once.
#: Returns {place: 1 | 0 | -1, holders, queued, rate: 1 | 0 | -1 (nil: not asked), ms left in
#: the period, entries, rate waiters}.
LIMITER_ACQUIRE: Final = _MUTEX + _MUTEX_ENTER + """
local rate_acquire
do
  local Q, QL, SEQ, P = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
""" + _THROTTLE_DEFS + _THROTTLE_ENTER + """
  rate_acquire = throttle_acquire
end
local ptok, lease, sigp = ARGV[1], tonumber(ARGV[8]), ARGV[9]
local m = mutex_acquire(ptok, tonumber(ARGV[2]), tonumber(ARGV[3]), lease, sigp)
if m[1] ~= 1 then return m end
local r = rate_acquire(ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]),
  lease, sigp)
if r[1] == -1 then
  redis.call('ZREM', H, ptok)
  grant(tonumber(ARGV[2]), sigp, lease)
  m[2] = redis.call('ZCARD', H)
end
return {m[1], m[2], m[3], r[1], r[2], r[3], r[4]}
"""

# -- Durable grants -----------------------------------------------------------------------------

#: KEYS: a scratch key of the limit, [the holders]. ARGV: tokens let in by another process's
#: script. A write of this process (set and deleted: nothing stays) after that script, so that
#: ``WAIT`` on its connection covers the grant; returns the tokens that are not holders (a
#: Mutex's or Limiter's place; a Throttle's entries are not kept).
CONFIRM: Final = """
redis.call('SET', KEYS[1], '1')
redis.call('DEL', KEYS[1])
local missing = {}
if KEYS[2] then
  for i = 1, #ARGV do
    if not redis.call('ZSCORE', KEYS[2], ARGV[i]) then missing[#missing + 1] = ARGV[i] end
  end
end
return missing
"""
