"""The package as users get it: the sdist and the wheel built by ``python -m build``, the wheel installed into a
fresh virtualenv, used there without the source tree.

To stay fast and offline, the build runs without isolation (the dev extra brings ``build``, ``setuptools``
and ``wheel``), the wheel is installed with ``--no-deps``, and the fresh venv sees the dependencies of this
environment through a ``.pth`` line naming its site-packages. A plain path line does not process the ``.pth``
files in that directory, so an editable install of the tree there stays invisible: the package can only come
from the wheel, and the test checks that it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from docblocks import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
STATUS_PAGE = "multicluster_source/ops/_static/status.html"


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd, env=env, check=False)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # sdist first, then the wheel from the unpacked sdist (what an installer from the sdist would do)
    done = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_sdist_and_the_wheel_hold_the_package_and_its_data(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    assert sdist.name == f"multicluster_kafka_source-{VERSION}.tar.gz"
    assert wheel.name == f"multicluster_kafka_source-{VERSION}-py3-none-any.whl"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", STATUS_PAGE, "multicluster_source/py.typed"} <= names
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        entry_points = whl.read(f"multicluster_kafka_source-{VERSION}.dist-info/entry_points.txt").decode()
    assert {STATUS_PAGE, "multicluster_source/py.typed", "multicluster_source/__init__.py"} <= files
    assert not any(f.startswith(("tests/", "docs/", "benchmarks/", "harness/")) for f in files)
    assert "multicluster-source = multicluster_source.tools.cli:main" in entry_points


def test_the_wheel_works_in_a_fresh_virtualenv_without_the_source_tree(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).stdout.strip()
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    installed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp_path,
        env,
    )
    assert installed.returncode == 0, installed.stderr
    assert (site / "multicluster_source" / "ops" / "_static" / "status.html").is_file()
    # Only now the dependencies: before, pip would see this environment's own install of the package there.
    (site / "_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "work"  # not the source tree, and no PYTHONPATH
    work.mkdir()

    probe = _run(
        [
            str(python),
            "-c",
            "import importlib.metadata, importlib.resources, multicluster_source\n"
            "from multicluster_source.ops._status_page import render_status_page\n"
            "print(multicluster_source.__file__)\n"
            "print(multicluster_source.__version__, importlib.metadata.version('multicluster-kafka-source'))\n"
            "page = importlib.resources.files('multicluster_source.ops').joinpath('_static/status.html')\n"
            "print(len(page.read_text(encoding='utf-8')) > 0)\n"
            "print('<html' in render_status_page([]))\n",
        ],
        work,
        env,
    )
    assert probe.returncode == 0, probe.stderr
    where, versions, template, rendered = probe.stdout.splitlines()
    assert Path(where).is_relative_to(site), where  # from the wheel, not from the tree
    assert versions == f"{VERSION} {VERSION}"
    assert template == rendered == "True"

    script = venv / "bin" / "multicluster-source"
    helped = _run([str(script), "--help"], work, env)
    assert helped.returncode == 0, helped.stderr
    assert "describe" in helped.stdout and "check" in helped.stdout

    example = work / "configmap.yaml"
    example.write_bytes((ROOT / "configmap-examples" / "configmap.yaml").read_bytes())
    checked = _run([str(script), "check", "configmap.yaml"], work, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("configmap.yaml: valid: 2 stream(s)"), checked.stdout
