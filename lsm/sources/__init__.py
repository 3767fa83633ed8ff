"""Sources of ingested records: the `Source` protocol and the sources lsm-sim ships.

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

from lsm.sources.partitioned_log import LogWriter, PartitionedLog
from lsm.sources.protocol import Source, SourceRecord

__all__ = ["LogWriter", "PartitionedLog", "Source", "SourceRecord"]
