#!/usr/bin/env bash
# Runs every libFuzzer harness of a fuzz build for a bounded time, each from
# its committed seed corpus (docs/fuzzing.md). Exits non-zero when a harness
# finds a crash, a leak, undefined behaviour, a timeout or runs out of memory;
# the input that did it is left in BUILD_DIR/fuzz-artifacts/.
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]      # SECONDS per harness, default 30
#
# BUILD_DIR is a tree configured with -DXK_FUZZ=ON (cmake --preset fuzz). The
# seed corpora are copied, so the run's new inputs never land in the source
# tree; they stay in BUILD_DIR/fuzz-corpus/<harness>/ for a longer run to
# start from.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR [SECONDS]}
seconds=${2:-30}

shopt -s nullglob
harnesses=("$build"/tests/fuzz/xk_fuzz_*)
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "run.sh: no harness in $build/tests/fuzz (configure with -DXK_FUZZ=ON and build xk_fuzz)" >&2
  exit 2
fi

# Leaks and UB are findings; an ASan report must end the run with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1

mkdir -p "$build/fuzz-artifacts"
failed=()
for bin in "${harnesses[@]}"; do
  [ -x "$bin" ] || continue
  name=${bin##*/xk_fuzz_}
  corpus="$build/fuzz-corpus/$name"
  mkdir -p "$corpus"
  if [ -d "$here/corpus/$name" ]; then cp -n "$here/corpus/$name"/* "$corpus"/ 2>/dev/null || true; fi
  log="$build/fuzz-artifacts/$name.log"
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a 2 GiB input is a bug.
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/fuzz-artifacts/$name-" "$corpus" > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "  $name ok: ${runs:-?} inputs in ${seconds} s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) files"
  else
    echo "  $name FAILED (log: $log):"
    # awk, not grep | head: under pipefail a head that stops reading kills
    # grep with SIGPIPE, and set -e then ends the script before the summary.
    awk '/runtime error|ERROR|SUMMARY|Test unit written|^    #[0-9]+ / && n++ < 30' "$log"
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
