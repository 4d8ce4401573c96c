"""Weight sync between the trainer and its engines: a `WeightPublisher` on the trainer's side, a
`WeightSource` on each engine's, and `EngineSync`, which decides when an engine loads.

`store.WeightStore` keeps the versions in shared memory for processes on one machine;
`broadcast.BroadcastPublisher` / `broadcast.BroadcastReceiver` send them over a torch.distributed
broadcast group (gloo on CPU, NCCL on GPU) to replicas in other processes or on other nodes;
`blobs.BlobPublisher` / `blobs.BlobReceiver` announce one runtime blob per version to each
replica and wait for none (replicas that may die); `layout` packs a model's tensors into the
buckets the broadcast sends. What a sync costs is summed in `PublishStats` (trainer) and
`SyncStats` (engine).
"""

from tempering.weights.blobs import BlobChannel, BlobPublisher, BlobReceiver
from tempering.weights.broadcast import BroadcastGroup, BroadcastPublisher, BroadcastReceiver, WeightSyncError
from tempering.weights.store import WeightStore
from tempering.weights.sync import EngineSync, PublishStats, SyncStats, WeightPublisher, WeightSource

__all__ = ["WeightStore", "EngineSync", "SyncStats", "PublishStats", "WeightPublisher", "WeightSource",
           "BroadcastPublisher", "BroadcastReceiver", "BroadcastGroup", "WeightSyncError", "BlobChannel", "BlobPublisher",
           "BlobReceiver"]
