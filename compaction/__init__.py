"""What to compact and how: the filter API, the scheduler, the one merge, and the executors.

`filter` (CompactionFilter API, the TTL filter), `scheduler` (plans, size-tiered and periodic picking,
the manifest edit), `policy` (the `CompactionPolicy` seam and its registry: `tiered`, `leveled`,
`fifo`; `drop` removes whole SSTs for fifo),
`merge` (inputs -> resolved, filtered rows -> output SSTs; every executor runs it), `local` (in-process
and background thread), `worker` (the worker process), `spark` (a job as one Spark batch). Knows
nothing of the DB object: it takes a `CompactionJob` and returns output SSTs; the DB commits them.
"""
