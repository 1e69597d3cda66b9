"""The public surface: the top package holds the contract's names and little else, every other public name
lives in its subpackage's ``__all__``; each list is pinned, sorted, documented on the API reference page,
and the names that left the top package still import from it with a warning naming their home."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import multicluster_source

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "reference" / "api.md"

# The names API.md marks as contract and expects from the top package, by section.
CONTRACT = {
    # section 1, the import surface (MultiClusterKafkaSourceBuilder is what .builder() returns there)
    "MultiClusterKafkaSource",
    "MultiClusterKafkaSourceBuilder",
    "OffsetsInitializer",
    "KafkaStream",
    "ClusterMetadata",
    "KafkaMetadataService",
    "StaticMetadataService",
    "FileMetadataService",
    "ConfigMapMetadataService",
    "KafkaTopicMetadataService",
    "StreamSetSubscriber",
    "StreamPatternSubscriber",
    "SourceRecord",
    "SourceStream",
    "RawRecord",
    "RackAwareStandbyAssignor",
    "DefaultRackAwareStandbyAssignor",
    "MultiClusterSourceError",
    "ConfigurationError",
    "MetadataError",
    "DeserializationError",
    # section 8: batches, event time, asyncio, checkpoint directories, the push API's control
    "MessageBatch",
    "WatermarkStrategy",
    "AsyncSourceStream",
    "CheckpointError",
    "RunControl",
    # section 9: hybrid sources
    "HybridSource",
    "KafkaArchiveSource",
}

# Section 11, added by the exactly-once issue: each name is expected at the top (and in its home's
# ``__all__``) once its home defines it; until then its absence is fine. Name -> (home module, attribute).
EXACTLY_ONCE = {
    "ExactlyOnceKafkaSink": "multicluster_source.sink",
    "ProducerFencedError": "multicluster_source.exceptions",
}


def _in_this_tree(module: str) -> bool:
    """Whether ``module`` is a file or package of this checkout (an editable install elsewhere may lend a
    namespace package of the same name)."""
    path = ROOT.joinpath(*module.split("."))
    return (path / "__init__.py").exists() or path.with_suffix(".py").exists()


def _defined(name: str) -> bool:
    """Whether the exactly-once issue has made ``name`` in its home yet."""
    home = EXACTLY_ONCE[name]
    return _in_this_tree(home) and hasattr(importlib.import_module(home), name)


def _present(*names: str) -> list[str]:
    return [n for n in names if _defined(n)]


# Every public package or module with its pinned ``__all__`` (the top package's is the contract).
PINNED: dict[str, list[str]] = {
    "multicluster_source": sorted(CONTRACT | set(_present(*EXACTLY_ONCE))),
    "multicluster_source.exceptions": sorted(
        [
            "CheckpointError",
            "ConfigurationError",
            "DeserializationError",
            "HandoverGapError",
            "MetadataError",
            "MetadataValidationError",
            "MultiClusterSourceError",
            "OffsetOutOfRangeError",
            "SourceFailedError",
            "StreamClosedError",
            "ClusterIdentityError",
            *_present("ProducerFencedError"),
        ]
    ),
    "multicluster_source.framework": [
        "CheckpointStorage",
        "DirectoryCheckpointStorage",
        "ObjectStore",
        "ObjectStoreCheckpointStorage",
        "column_schema",
    ],
    "multicluster_source.hybrid": [
        "ArchiveError",
        "ArchivedColumns",
        "AsyncHybridStream",
        "HandoverMode",
        "HybridSource",
        "HybridSourceBuilder",
        "HybridStage",
        "HybridStream",
        "InMemoryArchiveStage",
        "KafkaArchiveSource",
        "KafkaIcebergSource",
        "KafkaSourceStage",
        "StageHandover",
        "StageReader",
    ],
    "multicluster_source.metadata": [
        "ClusterMetadata",
        "ConfigMapMetadataService",
        "FileMetadataService",
        "KafkaMetadataService",
        "KafkaStream",
        "KafkaStreamSubscriber",
        "KafkaTopicMetadataService",
        "KafkaTopicMetadataWriter",
        "MetadataListener",
        "MetadataWriterFencedError",
        "NotifyingMetadataService",
        "ReplicaOf",
        "StaticMetadataService",
        "StreamPatternSubscriber",
        "StreamSetSubscriber",
        "dump_streams",
        "parse_streams",
        "redact_properties",
        "resolve_properties",
        "validate_streams",
    ],
    "multicluster_source.ops": [
        "KafkaTopicStatusStore",
        "LocalTopicStatusStore",
        "TopicStatusStore",
        "TopicTrackingDisabledError",
    ],
    "multicluster_source.replicas": ["OriginPosition", "Translation", "TranslationMode", "Translator"],
    "multicluster_source.runtime.push": ["RunControl", "RunResult"],
    "multicluster_source.sink": ["ClusterIdentityError", "ExactlyOnceKafkaSink", "ProducerFencedError"],
    "multicluster_source.spark": ["FORMAT", "register"],
    "multicluster_source.testing": [
        "InMemoryArchiveStage",
        "InMemoryMetadataService",
        "make_configmap_volume",
        "update_configmap_volume",
        "write_metadata_file",
    ],
}
# Public modules with an ``__all__`` that are command-line tools (docs/reference/cli.md), not Python API.
COMMAND_LINE = {"multicluster_source.tools.cli", "multicluster_source.tools.publish_metadata"}
# Packages the exactly-once issue adds: an ``__all__`` there is checked (sorted, documented) but not pinned here.
PENDING: set[str] = set()


def _public_modules_with_all() -> set[str]:
    """Every module or package of the library without a ``_`` part that defines ``__all__`` (read, not run)."""
    found = set()
    for path in (ROOT / "multicluster_source").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        if any(p.startswith("_") for p in parts):
            continue
        tree = ast.parse(path.read_text())
        targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
        targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            found.add(".".join(parts))
    return found


def _exported() -> dict[str, ModuleType]:
    """The modules whose ``__all__`` is Python API: the pinned ones and the pending ones that exist."""
    modules = {name: importlib.import_module(name) for name in PINNED}
    for name in PENDING:
        if _in_this_tree(name):
            modules[name] = importlib.import_module(name)
    return modules


def test_the_top_package_holds_the_contract_names_and_no_others() -> None:
    assert multicluster_source.__all__ == PINNED["multicluster_source"]
    missing = {n for n in CONTRACT if not hasattr(multicluster_source, n)}
    assert not missing, missing


def test_every_exactly_once_name_is_at_the_top_once_it_is_defined() -> None:
    for name in _present(*EXACTLY_ONCE):
        assert name in multicluster_source.__all__, name
        home = importlib.import_module(EXACTLY_ONCE[name])
        assert getattr(multicluster_source, name) is getattr(home, name)


@pytest.mark.parametrize("module", sorted(PINNED))
def test_every_public_all_is_pinned_and_sorted(module: str) -> None:
    names = importlib.import_module(module).__all__
    assert names == PINNED[module]
    assert names == sorted(names)


def test_every_public_module_with_an_all_is_pinned_here() -> None:
    assert _public_modules_with_all() - COMMAND_LINE - PENDING == set(PINNED)


def test_pending_packages_keep_a_sorted_all() -> None:
    for name, module in _exported().items():
        if name in PENDING:
            assert module.__all__ == sorted(module.__all__), name


def test_every_exported_name_is_importable_and_has_a_docstring() -> None:
    for module_name, module in _exported().items():
        for name in module.__all__:
            obj = getattr(module, name)
            if name in {"MetadataListener", "TranslationMode", "FORMAT", "HandoverMode"}:
                continue  # a type alias or a constant: documented by the string after it in its module
            assert inspect.getdoc(obj), f"{module_name}.{name}"
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (
                        inspect.isfunction(member) or isinstance(member, property)
                    ):
                        assert inspect.getdoc(member), f"{module_name}.{name}.{attr}"


def test_public_names_live_in_private_modules_or_public_packages() -> None:
    for module_name, module in _exported().items():
        for name in module.__all__:
            obj = getattr(module, name)
            home = getattr(obj, "__module__", None)
            if not inspect.isclass(obj) and not inspect.isfunction(obj):
                continue  # aliases and constants carry no module of their own
            assert home is not None and home.startswith("multicluster_source"), (module_name, name)
            parts = home.split(".")
            assert any(p.startswith("_") for p in parts[1:]) or home in PINNED, (module_name, name, home)


def _documented() -> set[int]:
    """The ids of the objects the API page renders: ``::: path`` of a name, or of a module (its ``__all__``)."""
    ids = set()
    for path in re.findall(r"^::: ([\w.]+)\s*$", API_PAGE.read_text(), flags=re.M):
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError:
            module_name, _, name = path.rpartition(".")
            ids.add(id(getattr(importlib.import_module(module_name), name)))
        else:
            ids.update(id(getattr(module, n)) for n in module.__all__)
    return ids


def test_every_exported_name_is_on_the_api_reference_page() -> None:
    documented = _documented()
    missing = [
        f"{module_name}.{name}"
        for module_name, module in _exported().items()
        for name in module.__all__
        if id(getattr(module, name)) not in documented
    ]
    assert not missing, f"add to docs/reference/api.md: {missing}"


def test_the_api_page_renders_each_name_from_its_public_home() -> None:
    homes = {f"{m}.{n}" for m, names in PINNED.items() for n in names} | set(PINNED) | PENDING
    found = re.findall(r"^::: ([\w.]+)\s*$", API_PAGE.read_text(), flags=re.M)
    pending = tuple(f"{p}." for p in PENDING)
    assert [p for p in found if p not in homes and not p.startswith(pending)] == []


@pytest.mark.parametrize("name", sorted(multicluster_source._MOVED))
def test_a_name_that_left_the_top_imports_from_it_with_a_warning_naming_its_home(name: str) -> None:
    home = multicluster_source._MOVED[name]
    assert name not in multicluster_source.__all__
    assert name in importlib.import_module(home).__all__
    with pytest.warns(
        DeprecationWarning, match=rf"multicluster_source\.{name} .*import it from {re.escape(home)}$"
    ):
        obj = getattr(multicluster_source, name)
    assert obj is getattr(importlib.import_module(home), name)


def test_a_misspelt_top_level_name_is_still_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="SourceStreem"):
            multicluster_source.SourceStreem  # type: ignore[attr-defined]  # noqa: B018  (mypy rejects it too)


def _moved_top_level_imports(text: str) -> set[str]:
    names = set()
    for match in re.finditer(
        r"from multicluster_source import \(([^)]*)\)|from multicluster_source import ([^\n(]+)", text
    ):
        names.update(re.findall(r"\w+", match.group(1) or match.group(2)))
    for match in re.finditer(r"\bmulticluster_source\.(\w+)", text):
        names.add(match.group(1))
    return names & set(multicluster_source._MOVED)


def test_docs_examples_benchmarks_and_tests_import_moved_names_from_their_homes() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for folder in ("examples", "benchmarks", "tests", "configmap-examples"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md"}]
    here = Path(__file__).resolve()
    wrong = {
        str(p.relative_to(ROOT)): sorted(found)
        for p in files
        if p.resolve() != here and (found := _moved_top_level_imports(p.read_text()))
    }
    assert wrong == {}
