"""Event time: what is the stream's watermark, and which splits run too far ahead of it?

- ``_watermarks``: the stream's watermark: split watermarks of what was returned, combined (the minimum over
  the active, non-idle splits, never decreasing), late records counted; told of assignments and removals by
  the coordinator, of what was returned by whoever takes the records.
- ``_alignment``: watermark alignment (FLIP-182/217): a coordinator timer that tells readers which splits
  to pause because their watermark is more than the allowed drift ahead of the group's.

Event time on the push API (what workers report, the driver's watermark) is in
:mod:`multicluster_source.runtime.push`.

May import: :mod:`multicluster_source.framework`, :mod:`multicluster_source.metadata`,
:mod:`multicluster_source.exceptions`; nothing else of the runtime (every other runtime folder may import
this one).
"""
