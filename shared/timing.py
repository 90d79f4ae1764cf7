"""The timing heuristics the service's behaviour depends on, in one place.

Each is a wait or a cache age inside one process: none changes what the queue guarantees (that is decided by
storage conditions and messages, docs/invariants.md), only how many storage calls and round trips a request costs
and how soon a change shows. Settings (shared/settings/) are what an operator tunes; these are what the code was
measured with. Each says why it is there and what chose its value; "history" is docs/performance-history.md.
The modules that use them read them as `timing.NAME` when they run, so a test may patch one here.
"""

from __future__ import annotations

# --- Writes and what follows them (shared/operations/writes/repository.py) ---

# A resolved run's index-row delete, tidied after the answer, waits this long for another row of its task queue to
# go with, rather than be a write of its own that the next createTask's or claim's index row would wait behind.
# Measured with it: history "2026-11-23 (night)": createTask 1.5 round trips where it took 2.3, same calls per task.
INDEX_TIDY_LINGER = 0.2

# A report's answer waits this long at most for the resolution's dependents to be released here (its worker's
# retry then stands in for it); a release that takes longer gets a resolution message of its own first.
# Introduced in history "A report answered once its dependents are released" (2026-11-26); the value itself is
# not measured on its own.
FOLLOW_WAIT = 0.5

# --- Messages that may arrive before the write they announce (claims.py, follow_up.py) ---

# A message written just before the write it announces usually finds that write done within milliseconds:
# re-check after these pauses (0.37 s in all) before putting the message back for QUEUE_HINT_RETRY_DELAY seconds.
# Not measured on its own: a write's round trip on Azurite is 1-20 ms, on Azure 5-50 ms.
CLAIM_SETTLE_PAUSES = (0.02, 0.05, 0.1, 0.2)

# The same for an event's dispatch request that finds its change not yet written (shared/outbox/log.py); one
# pause more (0.77 s in all): a request is put before its change's transaction, which may wait behind a group commit.
EVENT_SETTLE_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.4)

# --- Publishing events (shared/outbox/log.py) ---

# A change waits this long for its stream's publishing here to end, so as to hold the stream itself and write no
# cursor for that publishing. Introduced and measured in history "2026-11-24 (late evening)" (b152d5e).
HOLD_WAIT = 0.25

# An answer waits this long for its change's publishing here (usually a broker round trip or two) before it goes
# with a dispatch request instead: a busy broker's confirms then cost the request, not the caller's time.
# Where it showed: history "A dependent's createTask waits for its publishing only while the broker keeps up"
# (2026-11-26): under taskgraph's 50 creations at a time, most answers waited it out, hence PUBLISH_KEEPING_UP.
ANSWER_WAIT = 0.05

# A change goes without a dispatch request, its answer waiting for its publishing, only while the writers'
# publishing here takes less than this on average (smoothed with PUBLISH_SMOOTHING, the weight of the latest):
# when it takes longer (a broker under load, 50 creations at a time), most answers would wait ANSWER_WAIT and then
# put the request anyway, two round trips after the write instead of none beside it. Chosen in ANSWER_WAIT's entry.
PUBLISH_KEEPING_UP = ANSWER_WAIT / 2
# The weight of the latest publishing's time in that average (the rest is what it was).
PUBLISH_SMOOTHING = 0.1

# Another process's publication mark that did not cover a hold is read again after this long (shared/outbox/marks.py).
# Not measured on its own: the marks are written every QUEUE_EVENT_MARK_INTERVAL.
MARK_READ_AGAIN = 0.05

# Seconds beyond the mark interval that a caller of `stored` waits for a mark (storage may be slow).
MARK_PATIENCE = 2.0

# How long a reader waits for this process's write of a partition in flight before it reads storage
# (shared/outbox/inflight.py): longer than a write takes unless storage is failing.
IN_FLIGHT_WAIT = 2.0

# --- Uploads through the queue (shared/operations/s3_uploads.py) ---

# An `s3` upload whose body was still coming when its run resolved is stored if it ends within this of the
# resolution (a worker that reported before its last upload was answered); later, what readers of a resolved run
# read stays what it is. Not measured: generic-worker and scriptworker report only once their uploads are answered.
UPLOAD_FINISH_GRACE = 10.0

# --- Task groups (shared/domain/groups.py) ---

# How long a process trusts a group row it read (a group's sealing shows to other processes within this).
GROUP_CACHE_SECONDS = 1.0
# How old a known group row may be and still answer while it is read again in the background.
GROUP_STALE_SECONDS = 5.0
# How long a process answers listRecentTaskGroups from its last listing (about 300 storage reads each: the newest
# 100 groups, each group's row, unresolved rows and failures; a decision task once); a push shows within this.
RECENT_GROUPS_CACHE_SECONDS = 5.0
# How long a resolved member waits for others of its group to leave with it (after the worker's answer: it delays
# the group's resolution, not the dependents'): one transaction and one look for all, rather than two calls each.
# Introduced and measured in history "Groups left together" (2026-11-25, evening, c721c17).
LEAVE_LINGER = 0.2

# --- Checks due later (shared/domain/parking.py, shared/domain/deadlines.py) ---

# Seconds a parked message being moved to its trigger's queue stays hidden: a mover that died leaves it to the next
# tick of the mover's timer (every QUEUE_PARK_SCHEDULE), which finds it again; a mover stops receiving at half this.
# Not measured on its own: a move of 32 messages takes well under a second on Azurite.
MOVE_VISIBILITY = 20.0

# Seconds ahead of its bucket's time a deadline bucket message this process put is trusted: closer, the message may
# already be handled, so a new one is put (a spare finds the rows gone and does nothing). Not measured on its own.
ANNOUNCE_MARGIN = 2.0

# --- Workers (shared/domain/workers.py) ---

# How long a process trusts what it read of a worker's quarantine (quarantineWorker shows within this elsewhere).
QUARANTINE_CACHE_SECONDS = 5.0

# --- Uploads through the queue (shared/operations/writes/staging.py) ---

# An upload waits this long at most for its worker's share and a staging slot, its body unread, then is answered
# 503 with Retry-After: a waiting body is read by nothing, so no pace bound of the server's sees it (issue #83, H2).
# Not measured: a slot is held while a block of 4 MiB is staged, well under a second on Azure.
UPLOAD_WAIT = 30.0
