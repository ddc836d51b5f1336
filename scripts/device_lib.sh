# Shared by the prepared device scripts (scripts/device_next_*.sh; `source scripts/device_lib.sh`
# from the repository root): the environment of a device call and its two recurring steps. Logs and
# JSON go under $OUT (the device tool's output folder; gpu_results when run by hand).
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"

# Triton's kernel cache, carried from one device call to the next (each call usually starts a bare
# machine, and the cuda tier alone compiles hundreds of kernels): a call restores the tarball
# .device_carry/triton_cache.tar.xz if it was carried (`carry: [".device_carry"]`; copy the last
# call's $OUT/triton_cache.tar.xz there first), and writes the cache back to $OUT when it exits.
# Only the cubins and the metadata travel (~14 KB a kernel compressed); Triton then finds a kernel
# by its key (source, options, compiler and ptxas versions), so a changed kernel just compiles. The
# cache's group files name their files by absolute path: they are rewritten when the cache lands
# under another root, else Triton would miss them and recompile (never load a partial entry).
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
# the tarball must stay under the device tool's 16 MiB a returned file, and the save inside the
# call's 600 s: skipped past CACHE_SAVE_BY seconds of the script (a killed save leaves a truncated
# tarball, which the next restore rejects as a whole)
save_triton_cache() {
  [ -d "$TRITON_CACHE_DIR" ] || return 0
  if [ "$SECONDS" -gt "${CACHE_SAVE_BY:-560}" ]; then
    echo "triton cache: not saved, the call is at ${SECONDS} s"; return 0
  fi
  local out size
  out="$(cd "$OUT" && pwd)/triton_cache.tar.xz"
  echo "$TRITON_CACHE_DIR" > "$TRITON_CACHE_DIR/ROOT"
  if ! (cd "$TRITON_CACHE_DIR" && find . \( -name '*.cubin' -o -name '*.json' -o -name ROOT \) -print0 \
      | tar -cf - --null -T - | timeout 30 xz -T0 -6 > "$out"); then
    echo "triton cache: not saved (the compression failed or took over 30 s)"; rm -f "$out"; return 0
  fi
  size=$(stat -c %s "$out")
  if [ "$size" -gt 16000000 ]; then
    echo "triton cache: $size bytes, over what comes back; not saved"; rm -f "$out"
  else
    echo "triton cache: $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) kernels saved ($size bytes)"
  fi
}
restore_triton_cache
trap save_triton_cache EXIT

# cuda_tests LOG TIMEOUT PYTEST_ARGS...: the cuda tier of the named tests (14 workers) into $OUT/LOG,
# then its summary, the failures and the first failure's traceback
cuda_tests() {
  local log="$OUT/$1" limit=$2; shift 2
  timeout "$limit" python3 -m pytest -m cuda -q -p no:cacheprovider -n 14 --tb=short "$@" > "$log" 2>&1
  echo "rc=$?"
  tail -3 "$log"; grep -E "^(FAILED|ERROR)" "$log" | head -20
  grep -m1 -B2 -A30 "^____" "$log" | head -50
}

# head_paths NAME TIMEOUT BENCH_ARGS...: scripts/bench_coarse_wgmma.py over three alternating rounds
# (the wgmma paths only) into $OUT/NAME.log / .json, then the paths compared against the default
head_paths() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 scripts/bench_coarse_wgmma.py --no-previous --rounds 3 "$@" --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  echo "bench rc=$?"; python3 scripts/compare_head_paths.py "$OUT/$name.log"
}
