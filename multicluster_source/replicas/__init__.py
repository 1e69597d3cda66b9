"""Replica clusters: carrying a split's position to another copy of its records (MirrorMaker 2, a
byte-for-byte link, or a timestamp-preserving copy). See API.md section 9, "Replica clusters".

The declaration (:class:`~multicluster_source.metadata.ReplicaOf`) is part of the metadata; this package
holds what the enumerator uses to translate positions. Public here (``__all__``, on the API reference page):
what a translation decided, from ``_model``. The modules:

- ``_model``: :class:`Translation` (a ``status()["handovers"]`` entry), :class:`OriginPosition` and the
  :class:`Translator` protocol.
- ``_translate``: the translators, one picked by ``replicaOf.offsets``; ``_base``: what every translator
  shares (look-ups, the per-split loop that never raises, the log line); ``_mm2``: the ``mirrormaker2``
  translator.
- ``_codec``: MirrorMaker 2's record formats (offset syncs, checkpoints); ``_follow``: following its
  offset syncs and reading its checkpoints; ``_store``: the offset-sync history per origin partition and
  MM2's rule over it.
- ``_lookup``: look-ups on one cluster (log start and end, offsets by time, records of a range), one
  assign-only consumer each; ``_errors``: their error, and which of the client's errors may pass when
  asked again; ``_match``: recognising the copy of the last record received, to make a
  conservative start exact.
"""

from __future__ import annotations

from multicluster_source.replicas._model import OriginPosition, Translation, TranslationMode, Translator

__all__ = ["OriginPosition", "Translation", "TranslationMode", "Translator"]
