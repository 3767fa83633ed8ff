"""Pure codecs of every file lsm-sim writes: bytes <-> values, no directories, threads or policy.

`row` (row format v0/v1), `sst` (SST writer and reader, SsTableInfo), `bloom`, `wal` (WAL record),
`manifest` (manifest codec), `gorilla` (the seq tracker's streams), `verify` (deep SST check). Each
module opens with the byte diagram of what it writes; docs/format.md gathers them. Imports nothing of
the other lsm-sim packages.
"""
