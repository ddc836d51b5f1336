#!/usr/bin/env bash
# Run one command on a GPU machine from the repository root, carrying Triton's kernel cache from
# one run to the next (a fresh machine otherwise compiles every kernel again; the cuda tier alone
# compiles hundreds).
#
#   OUT=DIR bash scripts/device_run.sh COMMAND [ARGS...]
#   e.g. OUT=results bash scripts/device_run.sh python -m pytest -m cuda -q -n 14
#
# Before the command: .device_carry/triton_cache.tar.xz, if present, is unpacked into
# $TRITON_CACHE_DIR (.triton_cache). After it: the cache's cubins and metadata (~14 KB a kernel
# compressed) are packed into $OUT/triton_cache.tar.xz; copy that file to .device_carry/ for the
# next run. Triton finds a kernel by its key (source, options, compiler and ptxas versions), so a
# changed kernel just compiles. The cache's group files name their files by absolute path: they
# are rewritten when the cache lands under another root, else Triton would miss them and compile
# again. The save is skipped past CACHE_SAVE_BY seconds of the run (default 560) or when the
# archive exceeds CACHE_MAX_BYTES (default 16000000), for runners that bound a run's time or the
# size of a returned file; a truncated archive is rejected whole by the next restore.
# Exit status: the command's.
set -u
if [ $# -eq 0 ]; then
  echo "usage: OUT=DIR bash scripts/device_run.sh COMMAND [ARGS...]" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"
mkdir -p "$OUT"
export TRITON_CACHE_DIR="$PWD/.triton_cache"

restore_triton_cache() {
  local tarball=.device_carry/triton_cache.tar.xz old
  [ -f "$tarball" ] || return 0
  mkdir -p "$TRITON_CACHE_DIR"
  if ! tar -xJf "$tarball" -C "$TRITON_CACHE_DIR" || [ ! -f "$TRITON_CACHE_DIR/ROOT" ]; then
    echo "triton cache: unreadable, not used"; rm -rf "$TRITON_CACHE_DIR"; return 0
  fi
  old=$(cat "$TRITON_CACHE_DIR/ROOT")
  if [ "$old" != "$TRITON_CACHE_DIR" ]; then
    find "$TRITON_CACHE_DIR" -name '__grp__*.json' -exec sed -i "s#$old/#$TRITON_CACHE_DIR/#g" {} +
  fi
  echo "triton cache: $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) kernels restored"
}

save_triton_cache() {
  [ -d "$TRITON_CACHE_DIR" ] || return 0
  if [ "$SECONDS" -gt "${CACHE_SAVE_BY:-560}" ]; then
    echo "triton cache: not saved, the run is at ${SECONDS} s"; return 0
  fi
  local out size
  out="$(cd "$OUT" && pwd)/triton_cache.tar.xz"
  echo "$TRITON_CACHE_DIR" > "$TRITON_CACHE_DIR/ROOT"
  if ! (cd "$TRITON_CACHE_DIR" && find . \( -name '*.cubin' -o -name '*.json' -o -name ROOT \) -print0 \
      | tar -cf - --null -T - | timeout 30 xz -T0 -6 > "$out"); then
    echo "triton cache: not saved (the compression failed or took over 30 s)"; rm -f "$out"; return 0
  fi
  size=$(stat -c %s "$out")
  if [ "$size" -gt "${CACHE_MAX_BYTES:-16000000}" ]; then
    echo "triton cache: $size bytes, over CACHE_MAX_BYTES; not saved"; rm -f "$out"
  else
    echo "triton cache: $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) kernels saved ($size bytes)"
  fi
}

restore_triton_cache
"$@"
status=$?
save_triton_cache
exit $status
