"""The CLI contract on hostile input: every user error is one ``lowbit: error: ...`` line with exit
status 2 (no traceback); a signal during ``convert`` leaves nothing behind (exit 128 + signal);
a finished ``convert`` honours the umask."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import torch

from lowbit.cli import main
from tests.cli._tiny import make_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_main(argv, capsys) -> tuple[int, str]:
    """(exit status, stderr) of ``main(argv)``; argparse's errors exit through SystemExit."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


def _assert_one_error_line(rc: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("lowbit: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, err)


def _spawn(argv, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "lowbit", *argv], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kw)


# ------------------------------------------------------------------------- broken safetensors
def _good_bytes(tmp_path) -> bytes:
    make_checkpoint(str(tmp_path / "good.safetensors"), {"a.q_proj.weight": (32, 64)})
    return (tmp_path / "good.safetensors").read_bytes()


BROKEN = {
    "empty": lambda good: b"",
    "truncated": lambda good: good[: len(good) // 2],
    "header-cut": lambda good: good[:20],
    "corrupt-header": lambda good: (16).to_bytes(8, "little") + b"{not json at all" + b"x" * 64,
    "huge-header": lambda good: (10 ** 12).to_bytes(8, "little") + b"{}",
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_convert_broken_safetensors_is_a_user_error(tmp_path, capsys, kind):
    src = tmp_path / "src"
    src.mkdir()
    bad = src / "model.safetensors"
    bad.write_bytes(BROKEN[kind](_good_bytes(tmp_path)))
    for target in (bad, src):  # a file, and a directory holding it
        rc, err = _run_main(["convert", str(target), "--format", "int4", "--out", str(tmp_path / "out")], capsys)
        _assert_one_error_line(rc, err, "model.safetensors", "not a readable safetensors file")
    rc, err = _run_main(["convert", str(src), "--mp", "2", "--out", str(tmp_path / "out")], capsys)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == ["good.safetensors", "src"]


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_load_checkpoint_broken_safetensors_is_a_value_error(tmp_path, kind):
    from lowbit.io import load_checkpoint

    bad = tmp_path / "m.safetensors"
    bad.write_bytes(BROKEN[kind](_good_bytes(tmp_path)))
    with pytest.raises(ValueError, match="m.safetensors.*not a readable safetensors file"):
        load_checkpoint(bad)


def _hidden_files(tmp_path) -> dict:
    torch.save({"hidden": torch.randn(8, 64), "weight": torch.randn(256, 64)}, tmp_path / "ok.pt")
    ok = (tmp_path / "ok.pt").read_bytes()
    files = {"empty": b"", "truncated": ok[: len(ok) // 2], "garbage": b"garbage" * 20,
             "safetensors": _good_bytes(tmp_path)}
    out = {}
    for name, body in files.items():
        (tmp_path / f"{name}.pt").write_bytes(body)
        out[name] = (str(tmp_path / f"{name}.pt"), "cannot be read")
    for name, blob, needle in (("list", [1, 2], "needs 'hidden' and 'weight'"),
                               ("str", {"hidden": "x", "weight": torch.randn(4, 64)}, "'hidden' must be"),
                               ("int", {"hidden": torch.ones(4, 64, dtype=torch.int32), "weight": torch.randn(4, 64)}, "'hidden' must be"),
                               ("1d", {"hidden": torch.randn(64), "weight": torch.randn(4, 64)}, "'hidden' must be"),
                               ("w-empty", {"hidden": torch.randn(4, 64), "weight": torch.randn(0, 64)}, "'weight' must be"),
                               ("mismatch", {"hidden": torch.randn(4, 32), "weight": torch.randn(256, 64)}, "but the head is")):
        torch.save(blob, tmp_path / f"{name}.pt")
        out[name] = (str(tmp_path / f"{name}.pt"), needle)
    out["folder"] = (str(tmp_path), "is not a file")
    out["missing"] = (str(tmp_path / "nope.pt"), "does not exist")
    return out


def test_eval_head_broken_hidden_file_is_a_user_error(tmp_path, capsys):
    for name, (path, needle) in _hidden_files(tmp_path).items():
        rc, err = _run_main(["eval-head", "--hidden", path, "--configs", "fast:int4", "--out", str(tmp_path / "o")], capsys)
        _assert_one_error_line(rc, err, needle)
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------- unwritable output
def test_convert_output_under_a_file_is_a_user_error(tmp_path, capsys):
    # a file where the output's folder should be: fails for root too (chmod does not stop root)
    src = tmp_path / "m.safetensors"
    make_checkpoint(str(src), {"a.q_proj.weight": (32, 64)})
    (tmp_path / "afile").write_text("x")
    rc, err = _run_main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "afile" / "out")], capsys)
    _assert_one_error_line(rc, err, "is not a folder")
    rc, err = _run_main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "afile"), "--overwrite"], capsys)
    _assert_one_error_line(rc, err, "not a directory")
    assert sorted(os.listdir(tmp_path)) == ["afile", "m.safetensors"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores folder permissions")
def test_convert_read_only_output_folder_is_a_user_error(tmp_path, capsys):
    src = tmp_path / "m.safetensors"
    make_checkpoint(str(src), {"a.q_proj.weight": (32, 64)})
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc, err = _run_main(["convert", str(src), "--format", "int4", "--out", str(ro / "out")], capsys)
    finally:
        ro.chmod(0o755)
    _assert_one_error_line(rc, err, "cannot write the output")
    assert os.listdir(ro) == []


def test_convert_write_failure_midway_is_a_user_error_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    # what an unwritable or full disk looks like from the shard writer, for root too
    import lowbit.io.convert as conv

    src = tmp_path / "m.safetensors"
    make_checkpoint(str(src), {"a.q_proj.weight": (32, 64)})

    def refuse(path, tensors):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(conv, "_save_shard", refuse)
    rc, err = _run_main(["convert", str(src), "--format", "int4", "--out", str(tmp_path / "out")], capsys)
    _assert_one_error_line(rc, err, "Permission denied", "m.safetensors")
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]


def test_eval_head_unwritable_out_is_a_user_error(tmp_path, capsys):
    torch.save({"hidden": torch.randn(8, 64), "weight": torch.randn(256, 64)}, tmp_path / "h.pt")
    (tmp_path / "afile").write_text("x")
    rc, err = _run_main(["eval-head", "--hidden", str(tmp_path / "h.pt"), "--configs", "fast:int4",
                         "--out", str(tmp_path / "afile" / "o")], capsys)
    _assert_one_error_line(rc, err, "afile")


# ------------------------------------------------------------------------------------- signals
def _slow_source(tmp_path):
    """Two shards: a tiny first one, then 4 bf16 1024 x 1024 weights whose NVFP4 quantization takes
    seconds on CPU, so a signal sent when the first output shard appears lands mid-run."""
    src = tmp_path / "src"
    make_checkpoint(str(src / "model-00001-of-00002.safetensors"), {"a.q_proj.weight": (32, 64)})
    make_checkpoint(str(src / "model-00002-of-00002.safetensors"),
                    {f"b.{i}.q_proj.weight": (1024, 1024) for i in range(4)}, seed=1)
    return src


def _wait_for_first_shard(proc, tmp_path, timeout=120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"convert ended before the signal: {proc.stderr.read()}"
        for d in os.listdir(tmp_path):
            if d.startswith(".out.tmp-") and os.path.exists(tmp_path / d / "model-00001-of-00002.safetensors"):
                return
        time.sleep(0.005)
    raise AssertionError("convert never wrote its first shard")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_convert_signal_midway_leaves_nothing(tmp_path, sig):
    if not hasattr(signal, sig):
        pytest.skip(f"no {sig} here")
    signum = getattr(signal, sig)
    src = _slow_source(tmp_path)
    proc = _spawn(["convert", str(src), "--format", "nvfp4", "--out", str(tmp_path / "out")])
    try:
        _wait_for_first_shard(proc, tmp_path)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("lowbit: interrupted" if sig == "SIGINT" else f"lowbit: stopped by {sig}")
    assert sorted(os.listdir(tmp_path)) == ["src"]  # no temporary folder, no partial output


def test_sigint_before_the_heavy_imports_is_one_line():
    # Ctrl-C while the parser is being built (it imports lowbit.io, torch): one line, exit 130
    code = ("import os, signal, sys\n"
            "import lowbit.cli as cli\n"
            "real = cli.build_parser\n"
            "def build():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real()\n"
            "cli.build_parser = build\n"
            "sys.exit(cli.main(['info']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert r.stderr == "lowbit: interrupted\n"


def test_main_restores_the_signal_handlers(tmp_path, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert main(["tune", "nope"]) == 2
    assert {s: signal.getsignal(s) for s in before} == before


# --------------------------------------------------------------------------------------- modes
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_convert_output_honours_the_umask(tmp_path, mask):
    src = tmp_path / "src"
    make_checkpoint(str(src / "model.safetensors"), {"a.q_proj.weight": (32, 64), "norm.weight": (64,)})
    (src / "config.json").write_text("{}")
    for fmt, out in (("nvfp4", tmp_path / "out"), ("int4", tmp_path / "out")):  # fresh, then --overwrite
        code = (f"import os, sys\nos.umask({mask})\nfrom lowbit.cli import main\n"
                f"sys.exit(main(['convert', {str(src)!r}, '--format', {fmt!r}, '--out', {str(out)!r}, '--overwrite']))\n")
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~mask
        names = os.listdir(out)
        assert "model.safetensors" in names and "lowbit_quant_config.json" in names
        for name in names:
            assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o666 & ~mask, (name, oct(os.stat(out / name).st_mode))
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_save_checkpoint_honours_the_umask(tmp_path):
    code = ("import os, torch\nos.umask(0o022)\nfrom lowbit.io import save_checkpoint\n"
            f"save_checkpoint({str(tmp_path / 'm.safetensors')!r}, {{'w': torch.ones(2)}})\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "m.safetensors").st_mode) == 0o644


# ------------------------------------------------------------------------- the sweep of commands
def _sweep_cases():
    return [
        # (id, argv with {t} for the temp folder, a piece of the message)
        ("info-dispatch-shape", ["info", "--dispatch", "12x13"], "multiple of 16"),
        ("info-dispatch-text", ["info", "--dispatch", "abc"], "expected N x K"),
        ("info-unknown-option", ["info", "--bogus"], "unrecognized arguments"),
        ("unknown-command", ["bogus"], "invalid choice"),
        ("demo-missing-model", ["demo", "--model", "{t}/nothing"], "does not exist"),
        ("demo-model-not-gguf", ["demo", "--model", "{t}/good.safetensors"], "not a .gguf"),
        ("demo-model-empty-dir", ["demo", "--model", "{t}/emptydir"], "no config.json"),
        ("demo-bits", ["demo", "--bits", "3"], "--bits must be 2, 4 or 8"),
        ("demo-max-new-tokens", ["demo", "--max-new-tokens", "0"], "--max-new-tokens"),
        ("demo-threads", ["demo", "--threads", "0"], "--threads"),
        ("demo-device-bogus", ["demo", "--device", "bogus"], "--device 'bogus'"),
        ("demo-device-mps", ["demo", "--device", "meta"], "cpu or cuda"),
        ("demo-bits-text", ["demo", "--bits", "four"], "invalid int value"),
        ("eval-head-configs", ["eval-head", "--configs", "bogus", "--hidden", "x"], "--configs"),
        ("eval-head-positions", ["eval-head", "--positions", "0", "--hidden", "x"], "--positions"),
        ("eval-head-batch", ["eval-head", "--batch", "0", "--hidden", "x"], "--batch"),
        ("eval-head-batch-gen", ["eval-head", "--batch-gen", "0", "--hidden", "x"], "--batch-gen"),
        ("eval-head-device", ["eval-head", "--device", "bogus", "--hidden", "{t}/h.pt"], "--device"),
        ("eval-head-missing-model", ["eval-head", "--model", "{t}/nothing"], "does not exist"),
        ("eval-head-missing-hidden", ["eval-head", "--hidden", "{t}/nope.pt"], "does not exist"),
        ("bench-op", ["bench", "--op", "nope"], "unknown benchmark op"),
        ("bench-replot-missing", ["bench", "--replot", "{t}/missing.json"], "cannot read"),
        ("bench-replot-bad-json", ["bench", "--replot", "{t}/bad.json"], "cannot read"),
        ("bench-replot-binary", ["bench", "--replot", "{t}/good.safetensors"], "cannot read"),
        ("bench-replot-not-bench", ["bench", "--replot", "{t}/other.json"], "not a bench.json"),
        ("convert-missing", ["convert", "{t}/missing.safetensors", "--format", "int4", "--out", "{t}/o"], "does not exist"),
        ("convert-not-st", ["convert", "{t}/bad.json", "--format", "int4", "--out", "{t}/o"], "not a .safetensors"),
        ("convert-empty-dir", ["convert", "{t}/emptydir", "--format", "int4", "--out", "{t}/o"], "no .safetensors"),
        ("convert-format", ["convert", "{t}/good.safetensors", "--format", "int3", "--out", "{t}/o"], "invalid choice"),
        ("convert-no-format", ["convert", "{t}/good.safetensors", "--out", "{t}/o"], "--format is required"),
        ("convert-no-out", ["convert", "{t}/good.safetensors", "--format", "int4"], "--out"),
        ("convert-group-size", ["convert", "{t}/good.safetensors", "--format", "int4", "--out", "{t}/o", "--group-size", "0"], "multiple of 16"),
        ("convert-exists", ["convert", "{t}/good.safetensors", "--format", "int4", "--out", "{t}/emptydir"], "already exists"),
        ("convert-into-source", ["convert", "{t}/src", "--format", "int4", "--out", "{t}/src", "--overwrite"], "is the source"),
        ("convert-mp", ["convert", "{t}/good.safetensors", "--mp", "0", "--out", "{t}/o"], "--mp must be"),
        ("convert-mp-not-tiny", ["convert", "{t}/good.safetensors", "--mp", "2", "--out", "{t}/o"], "config.json"),
        ("convert-mp-format", ["convert", "{t}/good.safetensors", "--mp", "2", "--format", "int4", "--out", "{t}/o"], "--mp"),
        ("convert-experts-dtype", ["convert", "{t}/good.safetensors", "--format", "int4", "--experts-dtype", "fp8", "--out", "{t}/o"], "--experts-dtype"),
        ("selftest-steps", ["selftest", "--steps", "0"], "--steps"),
        ("selftest-device", ["selftest", "--device", "bogus"], "--device"),
        ("selftest-steps-text", ["selftest", "--steps", "x"], "invalid int value"),
        ("tune-no-op", ["tune"], "name an op"),
        ("tune-unknown-op", ["tune", "nope"], "no tuner"),
    ]


@pytest.fixture
def sweep_dir(tmp_path):
    make_checkpoint(str(tmp_path / "good.safetensors"), {"a.q_proj.weight": (32, 64)})
    make_checkpoint(str(tmp_path / "src" / "model.safetensors"), {"a.q_proj.weight": (32, 64)})
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.json").write_text('{"rows": []}')
    torch.save({"hidden": torch.randn(8, 64), "weight": torch.randn(256, 64)}, tmp_path / "h.pt")
    return tmp_path


@pytest.mark.parametrize("case", _sweep_cases(), ids=lambda c: c[0])
def test_every_user_error_is_one_line_and_exit_2(sweep_dir, capsys, case):
    _, argv, needle = case
    rc, err = _run_main([a.replace("{t}", str(sweep_dir)) for a in argv], capsys)
    _assert_one_error_line(rc, err, needle)
