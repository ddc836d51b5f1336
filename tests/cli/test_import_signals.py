"""A signal while the ``lowbit`` command is still importing torch (the first second of every run)
stops it with one line and exit status 128 + N, as once a command runs: ``import lowbit`` leaves
torch to the command, which imports it under the handlers :func:`lowbit.cli.main` installs first.

The timing is made deterministic by a ``sitecustomize`` that stalls the import of torch (after
touching a marker file) until the signal comes; no sleep races the import."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_STALL = '''
import os, sys, time

class _StallTorch:
    """Stall ``import torch`` (60 s at most) after touching the marker: the test signals then."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            open(os.environ["LOWBIT_TEST_MARK"], "w").close()
            end = time.monotonic() + 60
            while time.monotonic() < end:
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, _StallTorch())
'''

#: how the command is started: ``python -m lowbit``, and what the ``lowbit`` console script runs
ENTRIES = {
    "python -m lowbit": ["-m", "lowbit"],
    "console script": ["-c", "import sys; from lowbit.cli import main; sys.exit(main())"],
}


def _env(tmp_path):
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(_STALL)
    path = os.pathsep.join([str(tmp_path / "site"), ROOT, os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, LOWBIT_TEST_MARK=str(tmp_path / "mark"))


def _signal_during_torch_import(tmp_path, entry, argv, signum) -> tuple[int, str]:
    """(exit status, stderr) of the command ``argv`` sent ``signum`` while it imports torch."""
    proc = subprocess.Popen([sys.executable, *ENTRIES[entry], *argv], cwd=ROOT, env=_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "mark").exists():
            assert proc.poll() is None, f"the command ended before importing torch: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "the command never imported torch"
            time.sleep(0.005)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_while_torch_imports_is_one_line(tmp_path, entry, sig):
    if not hasattr(signal, sig):
        pytest.skip(f"no {sig} here")
    signum = getattr(signal, sig)
    rc, err = _signal_during_torch_import(tmp_path, entry, ["info"], signum)
    assert rc == 128 + signum, err
    assert err == ("lowbit: interrupted\n" if sig == "SIGINT" else f"lowbit: stopped by {sig}\n"), err


def test_import_lowbit_leaves_torch_to_first_use():
    """``import lowbit`` / ``import lowbit.cli`` import no torch; the lazily resolved names work and
    are bound on the package after their first use."""
    code = ("import sys\n"
            "import lowbit, lowbit.cli\n"
            "assert 'torch' not in sys.modules, 'torch imported by import lowbit'\n"
            "assert 'backend' not in vars(lowbit)\n"
            "from lowbit import set_backend\n"
            "assert 'torch' in sys.modules\n"
            "with lowbit.backend('reference'):\n"
            "    assert lowbit.get_backend() == 'reference'\n"
            "assert lowbit.get_backend() == 'auto' and vars(lowbit)['backend'] is lowbit._backend.backend\n"
            "assert callable(set_backend) and lowbit.ops.fp8_gemm is not None\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("LOWBIT_BACKEND", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
