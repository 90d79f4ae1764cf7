"""A run's resolution, told once here (the docs point to this).

A run resolves by a worker's report (reportCompleted/Failed/Exception: `Lifecycle.resolve`), by cancelTask, or by
expiry (a claim's `takenUntil` or the task's deadline passed: shared/operations/checks.py). Each is a change of the
task's row through the unit of work (`TaskRepository.modify`), to which it hands the resolution's steps
(`ResolutionSteps.before`, steps.py): nothing else of the write path knows what a resolution is.

Before the write: the run's live logs sealed (shared/operations/writes/livelogs.py); when the task resolves, its
resolution message put (or its claim check turned into it: `Guards.resolved`), and a task alone in the group named
after it, that nothing depends on, resolves that group in its own transaction. After the write: its spent checks
and its task queue's index row tidied, and what follows the resolution (`FollowUp`, follow_up.py: the group left,
the dependents released, a completed task's Index entry written) done by this process, while a message stands in
should it die first:

- Unguarded, the resolution message, hidden for `QUEUE_RESOLUTION_GRACE` seconds, is the fallback: this process
  follows the resolution up after its answer and deletes it (`resolve_here`); should it not, the `task-resolved`
  handler does (`FollowUp.follow_up`).
- Guarded (this process publishes its own events and follows its resolutions up), the running run's claim check,
  put before the claim, stands in, so nothing is put before the write (one storage round trip, not two). It stays
  until the events are published and what follows is done (dependents released and Index written before the
  answer, group left after it: `_follow_here`); should the process die before it answers, the worker's retry of
  its report follows the resolution up (`follow_up_repeat`), and should it die after, the check comes due at
  `takenUntil`, and its handler finds the run resolved and follows the resolution up (`FollowUp.follow_up_run`).

A dependent is released (given its first run, or a waiting rerun its new one) once the last of what it waits for
is met: shared/operations/scheduling.py (`Scheduling.release`), which the follow-up calls a page of dependents at
a time, handing the next page to a new message first so that no invocation runs long.
"""
