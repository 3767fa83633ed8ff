"""Sources of ingested records: the `Source` protocol and the sources lsm-sim ships.

`PartitionedLog` (Kafka-like partition files, written by `LogWriter`) and `DatabaseLog` (an upstream
lsm-sim database read by its seqs). See docs/ingest.md.

>>> import tempfile
>>> from lsm.sources import LogWriter, PartitionedLog
>>> d = tempfile.mkdtemp()
>>> with LogWriter(d) as w:
...     w.append(0, b"k", b"v")
0
>>> log = PartitionedLog(d)
>>> log.partitions(), log.end(0), [r.key for r in log.read(0, 0)]
([0], 1, [b'k'])
"""

from lsm.sources.conformance import verify_source
from lsm.sources.database_log import DatabaseLog
from lsm.sources.partitioned_log import LogWriter, PartitionedLog
from lsm.sources.protocol import BatchSource, ProgressSource, Source, SourceRecord

__all__ = ["BatchSource", "DatabaseLog", "LogWriter", "PartitionedLog", "ProgressSource", "Source", "SourceRecord", "verify_source"]
