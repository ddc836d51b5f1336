#!/usr/bin/env bash
# Session 23, call a: the two calls prepared in session 22 (scripts/device_sessions/device_session22_g.sh and _h.sh) in
# one device call, with their time limits trimmed to fit 600 s. Results under $OUT.
export OUT="${OUT:-gpu_results}"; mkdir -p "$OUT"
sed -e 's/timeout 150 /timeout 125 /g' scripts/device_sessions/device_session22_g.sh | bash
sed -e 's/timeout 90 /timeout 70 /; s/timeout 120 /timeout 105 /g; s/timeout 60 /timeout 45 /' \
  scripts/device_sessions/device_session22_h.sh | bash
