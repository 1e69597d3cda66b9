"""The ``mirrormaker2`` translator (first version: answers ``start`` until the offset-sync follower lands)."""

from __future__ import annotations

from multicluster_source.replicas._base import BaseTranslator, start_translation
from multicluster_source.replicas._model import OriginPosition, Translation

__all__ = ["MirrorMaker2Translator"]


class MirrorMaker2Translator(BaseTranslator):
    """Translates by MirrorMaker 2's offset syncs and checkpoints."""

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        return start_translation(position, to_split, "offset syncs not followed yet (work in progress)")
