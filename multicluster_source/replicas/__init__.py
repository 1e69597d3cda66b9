"""Replica clusters: carrying a split's position to another copy of its records (MirrorMaker 2, a
byte-for-byte link, or a timestamp-preserving copy). See API.md section 9, "Replica clusters".

The declaration (:class:`~multicluster_source.metadata._replica.ReplicaOf`) is part of the metadata;
this package holds what the enumerator uses to translate positions: :mod:`._model` the result of a
translation, and private modules beside it the MirrorMaker 2 record formats, the offset-sync history and the
translator.
"""

from __future__ import annotations

from multicluster_source.replicas._model import OriginPosition, Translation, TranslationMode, Translator

__all__ = ["OriginPosition", "Translation", "TranslationMode", "Translator"]
