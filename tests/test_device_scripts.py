"""The device scripts prepared for the next H200 session (``scripts/device_next_*.sh``, with the
helpers of ``scripts/device_lib.sh``: ``cuda_tests`` runs pytest's cuda tier, ``head_paths``
``bench_coarse_wgmma.py``) name only what exists: the benchmark's head paths (a name
``bench_coarse_wgmma.py --paths`` does not know is silently left out, so a typo would spend device
time on nothing), the ring probe's feeds, and pytest ``-k`` expressions that select some cuda
test. Also their shell syntax (``bash -n``)."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("device_next_*.sh"))
SHELL = SCRIPTS + [ROOT / "scripts" / "device_lib.sh"]


def _commands(script: Path) -> list[list[str]]:
    """The script's commands as argument lists (backslash continuations joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", script.read_text())
    out = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            for part in re.split(r";|&&|\|\|", line):
                try:
                    out.append(shlex.split(part))
                except ValueError:  # an unbalanced quote split across ';' parts: not a command we read
                    continue
    return out


def _option(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd and cmd.index(name) + 1 < len(cmd) else None


def test_there_are_device_scripts():
    assert SCRIPTS, "no scripts/device_next_*.sh"


@pytest.mark.parametrize("script", SHELL, ids=[s.name for s in SHELL])
def test_device_script_syntax(script):
    if shutil.which("bash") is None:
        pytest.skip("no bash on this machine")
    run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_device_script_names_exist(script):
    """Every ``--paths`` name of ``bench_coarse_wgmma.py`` is one of its paths, every ``--feeds`` name
    of ``probe_coarse_ring.py`` one of its feeds, and every pytest ``-k`` selects at least one test."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_coarse_wgmma
        import probe_coarse_ring
    except ImportError as e:  # the ring probe is a Gluon script
        pytest.skip(f"the device scripts' tools do not import here: {e}")
    finally:
        sys.path.pop(0)
    paths = {name for name, _ in bench_coarse_wgmma._paths()}
    for cmd in _commands(script):
        joined = " ".join(cmd)
        if ("bench_coarse_wgmma.py" in joined or cmd[:1] == ["head_paths"]) and _option(cmd, "--paths"):
            unknown = set(_option(cmd, "--paths").split(",")) - paths
            assert not unknown, f"{script.name}: bench paths {sorted(unknown)} do not exist"
        if "probe_coarse_ring.py" in joined and _option(cmd, "--feeds"):
            unknown = set(_option(cmd, "--feeds").split(",")) - set(probe_coarse_ring.FEEDS)
            assert not unknown, f"{script.name}: ring feeds {sorted(unknown)} do not exist"
        if ("pytest" in cmd or cmd[:1] == ["cuda_tests"]) and "-k" in cmd:
            targets = [a for a in cmd if a.startswith("tests/")]
            marks = ["-m", "cuda"] if cmd[0] == "cuda_tests" else ["-m", _option(cmd, "-m")] if "-m" in cmd else []
            run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                  *marks, "-k", _option(cmd, "-k"), *targets], cwd=ROOT, capture_output=True,
                                 text=True, timeout=600)
            assert re.search(r"^\d+ tests? collected|^\d+/\d+ tests collected", run.stdout, re.M) and \
                "no tests collected" not in run.stdout, f"{script.name}: -k {_option(cmd, '-k')!r} selects nothing"


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_device_script_files_exist(script):
    """Every ``scripts/*.py`` / ``*.sh`` and ``tests/...`` path a prepared script names is in the
    repository (a missing one would fail only on the device, after its start-up)."""
    named = set(re.findall(r"(?<![\w/$])((?:scripts|tests)/[\w/.-]+\.(?:py|sh))", script.read_text()))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{script.name}: {missing} do not exist"
