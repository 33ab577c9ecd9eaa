"""Worker-side storage of temporary files on SSD or HDD, with every file's I/O logged.

A :class:`TieredFileStore` places each file on the tier a :class:`TierChooser` picks and
logs one row per file; :class:`TieredSpillBuffer` (worker ``data=``) sends Dask spill
through it, :class:`PlacementWorkerPlugin` does the same for P2P shuffle and
rechunk files, and :class:`ShardCache` keeps cache shards (written once, read many
times) in it.
"""

from __future__ import annotations

from placement.storage.chooser import ByKindTier, FixedTier, TierChooser
from placement.storage.context import RequestBuilder, RunContext, get_run_context, set_run_context
from placement.storage.errors import (
    ShardError,
    StorageConfigError,
    StorageError,
    TierIOError,
    UnsafePathError,
)
from placement.storage.plugin import PlacementWorkerPlugin
from placement.storage.request import FileKind, FileRequest
from placement.storage.shards import ShardCache, ShardRef, drop_shard, put_shard, worker_shards
from placement.storage.spill import TieredSpillBuffer, tiered_spill_buffer
from placement.storage.store import RowSink, TempFile, TieredFileStore
from placement.storage.worker import (
    StorageOptions,
    WorkerStorage,
    flush_worker_logs,
    worker_storage,
    worker_storage_state,
)

__all__ = [
    "ByKindTier",
    "FileKind",
    "FileRequest",
    "FixedTier",
    "PlacementWorkerPlugin",
    "RequestBuilder",
    "RowSink",
    "RunContext",
    "ShardCache",
    "ShardError",
    "ShardRef",
    "StorageConfigError",
    "StorageError",
    "StorageOptions",
    "TempFile",
    "TierChooser",
    "TierIOError",
    "TieredFileStore",
    "TieredSpillBuffer",
    "UnsafePathError",
    "WorkerStorage",
    "drop_shard",
    "flush_worker_logs",
    "get_run_context",
    "put_shard",
    "set_run_context",
    "tiered_spill_buffer",
    "worker_storage",
    "worker_shards",
    "worker_storage_state",
]
