"""lowbit tune: listing the ops with a tuner, the usage errors, arguments passed through, and every
tuner's plain refusal on a machine without a GPU."""
from __future__ import annotations

import pathlib
import sys
import types

import pytest
import torch

import lowbit.ops
from lowbit.cli import main, tuners

OPS_DIR = pathlib.Path(lowbit.ops.__path__[0])


def test_list_names_every_op_with_a_tune_module(capsys):
    expected = sorted(p.parent.name for p in OPS_DIR.glob("*/tune.py"))
    assert sorted(tuners()) == expected
    assert main(["tune", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == expected and all(len(ln.split()) > 1 for ln in lines)


def test_unknown_op_is_a_usage_error(capsys):
    assert main(["tune", "no_such_op"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lowbit: error: no tuner for op 'no_such_op'; ops with a tuner:")
    assert all(op in err for op in tuners())


def test_no_op_is_a_usage_error(capsys):
    assert main(["tune"]) == 2
    assert "lowbit: error: name an op to tune" in capsys.readouterr().err


def test_arguments_after_the_op_reach_its_tuner(monkeypatch):
    """Everything after the op, options included, is the tuner's argv; its return is the exit status."""
    seen = []
    fake = types.ModuleType("lowbit.ops.fake_op.tune")
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "lowbit.ops.fake_op.tune", fake)
    monkeypatch.setattr("lowbit.cli.tuners", lambda: {"fake_op": "a fake tuner"})
    assert main(["tune", "fake_op", "--n", "5", "--help"]) == 3
    assert seen == [["--n", "5", "--help"]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown on a machine without a GPU")
@pytest.mark.parametrize("op", sorted(tuners()) or [pytest.param(None, marks=pytest.mark.skip(reason="no tuner yet"))])
def test_tuner_without_gpu_says_so(op, capsys):
    """A tuner run without a GPU (and without a mode that needs none) exits non-zero with a line
    that names the missing GPU, no traceback."""
    rc = main(["tune", op])
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc != 0 and ("GPU" in text or "CUDA" in text) and "Traceback" not in text
