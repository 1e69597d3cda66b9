"""Rack-aware placement of splits: active readers near the partition leader, standby readers elsewhere.

Two independent pieces live here:

* :func:`place_actives` hands every split to exactly one reader. Reader loads never differ by more than one
  split; within that limit as many splits as possible land on a reader in the rack of their partition leader.
* :class:`RackAwareStandbyAssignor` is the pluggable policy that says in which racks a split may have a
  standby reader (the Python counterpart of KIP-708's ``RackAwareStandbyTaskAssignor``).
  :class:`DefaultRackAwareStandbyAssignor` spreads up to ``num_standby_replicas`` standbys per split over
  racks other than the active's, least-loaded rack first. :func:`load_assignor` builds a user's policy from a
  ``"module:Class"`` string.

Everything is deterministic: results depend on the contents of the inputs, never on their iteration order.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Protocol, cast, runtime_checkable

from multicluster_source.exceptions import ConfigurationError

__all__ = [
    "DefaultRackAwareStandbyAssignor",
    "RackAwareStandbyAssignor",
    "load_assignor",
    "place_actives",
]

_log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ standby policy


@runtime_checkable
class RackAwareStandbyAssignor(Protocol):
    """Decides in which racks each split may have a standby reader."""

    def assign_standbys(self, split_racks: Mapping[str, str], reader_racks: set[str]) -> dict[str, set[str]]:
        """Map each rack to the split ids that may have a standby reader there.

        ``split_racks`` maps a split id to the rack of its active reader; ``reader_racks`` holds every rack
        that has at least one reader. A split may appear under several racks (one per standby).
        """
        ...


class DefaultRackAwareStandbyAssignor:
    """Spread up to ``num_standby_replicas`` standbys per split over racks other than its active's rack.

    Splits are visited in sorted id order. For each one the eligible racks are the reader racks other than
    the active's; the assignor takes the ``num_standby_replicas`` of them carrying the fewest standbys so far
    (ties go to the smaller rack name), each rack at most once per split. When no other rack exists the split
    is placed in its active's own rack instead, so no split ever drops out of the result; one warning per
    call reports how many splits had to fall back. Every reader rack appears as a key, possibly with an empty
    set.
    """

    def __init__(self, num_standby_replicas: int = 1) -> None:
        if isinstance(num_standby_replicas, bool) or not isinstance(num_standby_replicas, int):
            raise ConfigurationError(
                f"num_standby_replicas must be an int, got {type(num_standby_replicas).__name__}"
            )
        if num_standby_replicas < 1:
            raise ConfigurationError(f"num_standby_replicas must be at least 1, got {num_standby_replicas}")
        self.num_standby_replicas = num_standby_replicas

    def __repr__(self) -> str:
        return f"DefaultRackAwareStandbyAssignor(num_standby_replicas={self.num_standby_replicas})"

    def assign_standbys(self, split_racks: Mapping[str, str], reader_racks: set[str]) -> dict[str, set[str]]:
        """Return rack -> split ids that may have a standby there (see the class docstring for the rules)."""
        racks = sorted(reader_racks)
        # One set per rack, created once and only ever added to: placements made earlier in the loop survive
        # whatever split comes next (KIP-708's sample replaced a rack's set when it met a split of that rack).
        result: dict[str, set[str]] = {rack: set() for rack in racks}
        load: dict[str, int] = dict.fromkeys(racks, 0)
        fallbacks = 0
        for split_id in sorted(split_racks):
            active_rack = split_racks[split_id]
            eligible = [rack for rack in racks if rack != active_rack]
            if not eligible:
                fallbacks += 1
                result.setdefault(active_rack, set()).add(split_id)
                load[active_rack] = load.get(active_rack, 0) + 1
                continue
            eligible.sort(key=lambda rack: (load[rack], rack))
            for rack in eligible[: self.num_standby_replicas]:
                result[rack].add(split_id)
                load[rack] += 1
        if fallbacks:
            _log.warning(
                "%d of %d splits have no reader rack other than their active's (reader racks: %s); "
                "their standby falls back to the active's rack",
                fallbacks,
                len(split_racks),
                racks or "none",
            )
        return result


def load_assignor(spec: str) -> RackAwareStandbyAssignor:
    """Import ``"module:Class"`` and instantiate ``Class`` without arguments (``Class`` may be dotted).

    Raises :class:`~multicluster_source.exceptions.ConfigurationError` naming ``spec`` when the string is
    malformed, the module or attribute does not exist, instantiation fails, or the object has no callable
    ``assign_standbys``.
    """
    if not isinstance(spec, str):
        raise ConfigurationError(f"standby assignor {spec!r}: expected a 'module:Class' string")
    module_name, sep, attr_path = (part.strip() for part in spec.partition(":"))
    if not sep or not module_name or not attr_path or ":" in attr_path:
        raise ConfigurationError(
            f"standby assignor {spec!r}: expected 'module:Class', e.g. "
            "'multicluster_source.enumerator._standby:DefaultRackAwareStandbyAssignor'"
        )
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"standby assignor {spec!r}: cannot import module {module_name!r}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigurationError(
                f"standby assignor {spec!r}: {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    if not callable(target):
        raise ConfigurationError(f"standby assignor {spec!r}: {attr_path!r} is not a class or callable")
    try:
        instance: object = target()
    except Exception as exc:
        raise ConfigurationError(
            f"standby assignor {spec!r}: instantiating {attr_path!r} without arguments failed: {exc!r}"
        ) from exc
    if not callable(getattr(instance, "assign_standbys", None)):
        raise ConfigurationError(
            f"standby assignor {spec!r}: {type(instance).__name__} has no callable 'assign_standbys'"
        )
    return cast(RackAwareStandbyAssignor, instance)


# ------------------------------------------------------------------------------------------ active placement

_REASON_LOCAL = "leader rack {rack}"
_REASON_NO_READER = "balanced: no reader in leader rack {rack}"
_REASON_OVERFLOW = "balance over locality"
_REASON_UNKNOWN = "balanced: leader rack unknown"


def place_actives(
    split_leader_racks: Mapping[str, str | None],
    reader_racks: Mapping[int, str | None],
) -> tuple[dict[int, list[str]], dict[str, str]]:
    """Give every split one active reader, preferring the rack of the split's partition leader.

    ``split_leader_racks`` maps a split id to the rack of its partition leader (``None`` or ``""`` when
    unknown); ``reader_racks`` maps a reader index to its rack (``None`` or ``""`` when it has none).

    Balance is a hard rule: with ``N`` splits and ``R`` readers every reader ends with ``N // R`` or
    ``N // R + 1`` splits, so loads differ by at most one. Within that rule the number of splits placed in
    their leader's rack is maximal: the readers allowed the extra split are chosen in the racks whose leader
    demand exceeds their base capacity. Splits that cannot stay local go to the least-loaded reader with room
    (ties to the lowest reader index).

    Returns ``(reader -> sorted split ids, split id -> reason)``; every reader is a key. Reasons are
    ``"leader rack <r>"``, ``"balanced: no reader in leader rack <r>"``, ``"balance over locality"`` (the
    leader's rack is full) and ``"balanced: leader rack unknown"``. Raises ``ConfigurationError`` when there
    are splits but no readers.
    """
    readers = sorted(reader_racks)
    splits = sorted(split_leader_racks)
    if not readers:
        if splits:
            raise ConfigurationError(f"cannot place {len(splits)} splits: there are no readers")
        return {}, {}

    base, extra_total = divmod(len(splits), len(readers))
    readers_in: dict[str, list[int]] = {}
    for reader in readers:
        rack = reader_racks[reader]
        if rack:
            readers_in.setdefault(rack, []).append(reader)
    demand: dict[str, int] = {}
    for split_id in splits:
        rack = split_leader_racks[split_id]
        if rack and rack in readers_in:
            demand[rack] = demand.get(rack, 0) + 1

    # Capacity: every reader takes `base`, `extra_total` of them take one more. Each extra slot helps locality
    # by exactly one split when it goes to a rack whose demand exceeds its base capacity, so hand extras to
    # such racks first (sorted rack order), then the rest to whichever readers remain (sorted index order).
    capacity = dict.fromkeys(readers, base)
    extras_left = extra_total
    for rack in sorted(readers_in):
        members = readers_in[rack]
        shortfall = demand.get(rack, 0) - base * len(members)
        for reader in members[: max(0, min(shortfall, extras_left))]:
            capacity[reader] += 1
            extras_left -= 1
    for reader in readers:
        if extras_left == 0:
            break
        if capacity[reader] == base:
            capacity[reader] += 1
            extras_left -= 1

    assignment: dict[int, list[str]] = {reader: [] for reader in readers}
    reasons: dict[str, str] = {}

    def least_loaded(candidates: list[int]) -> int | None:
        open_readers = [r for r in candidates if len(assignment[r]) < capacity[r]]
        if not open_readers:
            return None
        return min(open_readers, key=lambda r: (len(assignment[r]), r))

    deferred: list[str] = []
    for split_id in splits:
        rack = split_leader_racks[split_id]
        chosen = least_loaded(readers_in[rack]) if rack and rack in readers_in else None
        if chosen is None:
            deferred.append(split_id)
            continue
        assignment[chosen].append(split_id)
        reasons[split_id] = _REASON_LOCAL.format(rack=rack)
    for split_id in deferred:
        chosen = least_loaded(readers)
        assert chosen is not None, "capacities sum to the number of splits"
        assignment[chosen].append(split_id)
        rack = split_leader_racks[split_id]
        if not rack:
            reasons[split_id] = _REASON_UNKNOWN
        elif rack not in readers_in:
            reasons[split_id] = _REASON_NO_READER.format(rack=rack)
        else:
            reasons[split_id] = _REASON_OVERFLOW
    for placed in assignment.values():
        placed.sort()
    return assignment, reasons
