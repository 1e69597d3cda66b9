"""The push API's transports: where do a run's workers live, and how do messages reach them and come back?

One module per ``runtime=`` value, each a :class:`~multicluster_source.runtime.core._messages.Transport`
that starts one worker per reader around a :class:`~multicluster_source.runtime.push._host.WorkerHost`:

- ``_threads``: ``runtime="threads"``, each worker a thread of this process.
- ``_processes``: ``runtime="processes"``, one worker process per reader on this machine, one pipe each.
- ``_ray``: ``runtime="ray"``, readers as Ray actors across the nodes of a Ray cluster (the ``ray`` extra).

May import: :mod:`multicluster_source.runtime.push` (the worker host, the event-time report),
:mod:`multicluster_source.runtime.core`, and what the runtime may import (see
:mod:`multicluster_source.runtime`).
"""
