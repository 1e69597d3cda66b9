"""What every runtime shares: how is the enumerator run, how do fetched batches reach whoever takes them with
their positions, how are checkpoints taken and a run stopped, and what does a runtime need of a source?

- ``_local``: :class:`Coordinator` (the enumerator's mailbox thread, its timers and blocking calls; the push
  driver's is a subclass, :mod:`multicluster_source.runtime.push`'s ``_coordinator``) and
  :class:`ReaderRunner` (one reader on a thread of its own, for the pull stream).
- ``_handoff``: the bounded hand-off between fetch threads and their consumer, and the delivered positions
  (:class:`PositionTracker`) that checkpoints are taken from.
- ``_delivery``: taking records or batches out of the hand-off with exactly the positions of what was taken.
- ``_checkpointer``: checkpoints captured on the thread that owns the run (what moved since the last one),
  written and committed on the source's checkpoint thread; used by the stream and the push driver.
- ``_enumeration``: stopping the enumerator and the readers, the same for the stream and the push driver;
  ``_memory``: giving the memory a closed source freed back to the system.
- ``_factory``: the :class:`SourceFactory` protocol (what a runtime needs of a source) and the checks made
  before readers start.
- ``_messages``: the plain values a reader's inbox carries (splits, events, no more splits), which are also
  what the push driver and its workers say to each other over a transport, and the transport seam itself.
- ``_sink_state``: where a stream or run with an exactly-once sink starts (the sink's positions over the
  checkpoint's).

May import: :mod:`multicluster_source.runtime.eventtime`, :mod:`multicluster_source.enumerator`,
:mod:`multicluster_source.reader`, :mod:`multicluster_source.ops`, :mod:`multicluster_source.framework`,
:mod:`multicluster_source.metadata`, :mod:`multicluster_source.exceptions`; never the pull or push folders
(they build on this one).
"""
