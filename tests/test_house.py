"""The house stays a library: what git tracks is checked against the limits the repository keeps.

* no tracked file name or line narrates work: a "session" that is not a software session (test
  session, ``scope="session"``), device calls, single-letter device-call references ("call b",
  "calls a-c", "(call e)"), device runs still pending, run-named files;
* ``scripts/`` and ``tools/`` hold only the operator tools of :data:`TOOLS`;
* at most :data:`MAX_FILES` tracked files, :data:`MAX_MARKDOWN_BYTES` of markdown;
* measurement data under ``docs/perf`` at most :data:`MAX_PERF_BYTES`; nothing under
  ``docs/measurements``;
* no test imports or runs anything from ``scripts/``.

Each failure names the offending files (and lines). Reads ``git ls-files``: skipped outside a git
checkout. This file is left out of the phrase check (it spells the patterns out).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = "tests/test_house.py"

#: the operator tools allowed under scripts/ and tools/
TOOLS = {
    "scripts/setup.sh",  # the README's first command and CI's install
    "scripts/setup_vllm.sh",  # the separate vLLM venv of tests/vllm (CI's second stage)
    "scripts/gpu_check.sh",  # the GPU tier in one run
    "scripts/device_run.sh",  # a command on a GPU machine with Triton's kernel cache carried
    "scripts/check_sass.py",  # the GEMMs' FP8 tensor-core instructions, on the GPU
    "scripts/ncu_kernel.sh",  # Nsight Compute of one launch, summarized
    "scripts/ncu_stall_regions.py",  # its stall samples by region of the SASS
    "scripts/real_head_data.py",  # the real-head benchmark's data, written where the model loads
}
MAX_FILES = 300
MAX_MARKDOWN_BYTES = 200 * 1024
MAX_PERF_BYTES = 3 * 1024 * 1024

#: "session" is allowed only where it names a software session, not a stretch of work
_SESSION = re.compile(r"(?<![a-z])sessions?(?![a-z])", re.I)
_SESSION_OK = re.compile(r"(?:test|pytest|inference|training|interactive|ssh|http|user|login|browser|shell|terminal)"
                         r"[ _-]$|\.$", re.I)
#: lines that narrate work rather than describe the project
WORK_LOG = [
    ("a device session or call", re.compile(r"\b(?:device|GPU|H[12]00)\s+(?:sessions?|calls?|runs? of)\b", re.I)),
    # "call b", "calls c / e", "(call a)", "calls a-c", "calls a and c", "call d's"; not "calls a draft head",
    # "calls e.g."
    ("a device-call reference", re.compile(r"\b[Cc]alls? (?:a(?=\s*(?:[-/,;:()]|'s\b|and\s+(?:[b-h]\b|was\b|were\b)|$))"
                                           r"|[b-h](?!\w|\.\w\.))")),
    ("a pending device run", re.compile(r"\b(?:not yet|never) (?:run|timed|measured) on (?:the |an? )?(?:H[12]00|GPU)\b"
                                        r"|\bun(?:run|timed) on (?:the |an? )?(?:H[12]00|GPU)\b", re.I)),
]


def _session_lines(line: str) -> bool:
    """Whether ``line`` speaks of a session of work (any "session" not in a software sense:
    "test session", ``scope="session"``, ``tf.Session``)."""
    for m in _SESSION.finditer(line):
        before, after = line[:m.start()], line[m.end():m.end() + 1]
        if not (_SESSION_OK.search(before[-13:]) or after in ("'", '"') and before[-1:] in ("'", '"')):
            return True
    return False


#: file names that name a run instead of what they hold
RUN_NAMED = re.compile(r"session|(?:^|[_-])calls?[_-]?[a-h](?:[_.-]|$)|\d{4}-\d{2}-\d{2}|device_next|(?:^|[_/-])round\d",
                       re.I)
#: a test reaching into scripts/ (an import, or a path built from it)
USES_SCRIPTS = re.compile(r"(?:from|import)\s+scripts\b|[\"']scripts[\"']|[\"'/]scripts/")


@pytest.fixture(scope="module")
def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout (or no git): the house check reads `git ls-files`")
    files = [f for f in out.decode().split("\0") if f]
    if not files:
        pytest.skip("git tracks no files here")
    return [f for f in files if (ROOT / f).is_file()]  # a deletion not yet committed is gone already


def _text(path: str) -> str | None:
    data = (ROOT / path).read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _report(title: str, offenders: list[str], limit: int = 60) -> str:
    more = f"\n  ... and {len(offenders) - limit} more" if len(offenders) > limit else ""
    return f"{title} ({len(offenders)}):\n  " + "\n  ".join(offenders[:limit]) + more


def test_no_work_log_lines(tracked):
    offenders = []
    for path in tracked:
        if path == SELF:
            continue
        text = _text(path)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            what = "a session of work" if _session_lines(line) else next(
                (what for what, pattern in WORK_LOG if pattern.search(line)), None)
            if what:
                offenders.append(f"{path}:{n}: {what}: {line.strip()[:160]}")
    assert not offenders, _report("tracked lines that narrate work (say what the project is, not how it got there)",
                                  offenders)


def test_no_run_named_files(tracked):
    offenders = [p for p in tracked if RUN_NAMED.search(p)]
    assert not offenders, _report("tracked files named after a run or session", offenders)


def test_scripts_and_tools_hold_only_the_operator_tools(tracked):
    extra = sorted(p for p in tracked if p.startswith(("scripts/", "tools/")) and p not in TOOLS)
    assert not extra, _report("files under scripts/ or tools/ beyond the operator tools (tests/test_house.py TOOLS); "
                              "a benchmark goes to lowbit/bench, a tuner to lowbit/ops/<op>/tune.py", extra)


def test_tracked_file_count(tracked):
    assert len(tracked) <= MAX_FILES, (
        f"{len(tracked)} tracked files, over {MAX_FILES}; by top-level folder: "
        + ", ".join(f"{d} {n}" for d, n in sorted(_count_by_top(tracked).items(), key=lambda kv: -kv[1])))


def _count_by_top(paths: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in paths:
        top = p.split("/", 1)[0] if "/" in p else "."
        out[top] = out.get(top, 0) + 1
    return out


def test_markdown_size(tracked):
    sizes = {p: (ROOT / p).stat().st_size for p in tracked if p.lower().endswith(".md")}
    total = sum(sizes.values())
    biggest = [f"{p}: {s / 1024:.1f} KB" for p, s in sorted(sizes.items(), key=lambda kv: -kv[1])[:10]]
    assert total <= MAX_MARKDOWN_BYTES, _report(
        f"tracked markdown is {total / 1024:.1f} KB, over {MAX_MARKDOWN_BYTES // 1024} KB; the largest", biggest)


def test_measurement_data(tracked):
    leftover = [p for p in tracked if p.startswith("docs/measurements/")]
    assert not leftover, _report("files under docs/measurements (records live in docs/perf/<gpu>/, small and "
                                 "current)", leftover)
    sizes = {p: (ROOT / p).stat().st_size for p in tracked if p.startswith("docs/perf/")}
    total = sum(sizes.values())
    biggest = [f"{p}: {s / 1024:.1f} KB" for p, s in sorted(sizes.items(), key=lambda kv: -kv[1])[:10]]
    assert total <= MAX_PERF_BYTES, _report(
        f"docs/perf holds {total / 2**20:.2f} MB, over {MAX_PERF_BYTES / 2**20:.0f} MB; the largest", biggest)


def test_no_test_uses_scripts(tracked):
    offenders = []
    for path in tracked:
        if not (path.startswith("tests/") and path.endswith(".py")) or path == SELF:
            continue
        for n, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1):
            if USES_SCRIPTS.search(line):
                offenders.append(f"{path}:{n}: {line.strip()[:160]}")
    assert not offenders, _report("tests that import or run something from scripts/ (move what they need into "
                                  "the package or tests/)", offenders)
