#!/usr/bin/env bash
# Deep fuzzing: many more examples than the suite, with a random seed, on every operation of the API
# and on both backends (a throw-away PostgreSQL is started). Adds the run to docs/fuzzing.md (which
# lists the passing runs, then the newest run's counts), only when the run passed: a failed run leaves
# docs/fuzzing.md as it was and prints its report.
#   bash scripts/fuzz.sh                                 # 500 examples per operation, a random seed
#   bash scripts/fuzz.sh --examples 2000 --seed 42       # or BATON_FUZZ_EXAMPLES / BATON_FUZZ_SEED
#   bash scripts/fuzz.sh --examples 2 --output /tmp/fuzzing.md -- -k sqlite   # after --: pytest's arguments
set -euo pipefail
cd "$(dirname "$0")/.."
examples=${BATON_FUZZ_EXAMPLES:-500}
seed=${BATON_FUZZ_SEED:-}
output=docs/fuzzing.md
while [ $# -gt 0 ]; do
  case $1 in
    --examples) examples=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $examples in '' | *[!0-9]* | 0) echo "fuzz.sh: --examples must be a positive number (got '$examples')" >&2; exit 2 ;; esac
seed=${seed:-$(python3 -c 'import secrets; print(secrets.randbelow(2**32))')}
# What the run tests: the commit, and whether the code differs from it.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain -- src tests harness scripts pyproject.toml)" ]; then
  commit="$commit with local changes"
fi
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
export TMPDIR="$BATON_SERVICES_DIR/tmp"
mkdir -p "$TMPDIR" && chmod 755 "$TMPDIR"
work=$(mktemp -d "$TMPDIR/fuzz.XXXXXX")
report="$work/fuzz-report.jsonl"
started=$(date +%s)
status=0
BATON_HYPOTHESIS_PROFILE=deep BATON_FUZZ_EXAMPLES="$examples" BATON_FUZZ_REPORT="$report" \
  python -m pytest tests/integration/test_fuzz.py tests/integration/test_bad_input.py -p no:cacheprovider -q \
  --basetemp="$work/pytest" --hypothesis-seed="$seed" --junitxml="$work/junit.xml" "$@" || status=$?
written="$work/fuzzing.md"
if [ ! -s "$report" ] || [ ! -s "$work/junit.xml" ]; then
  echo "fuzz.sh: pytest ran no fuzzing (exit status $status); $output left as it was" >&2
  exit $(( status == 0 ? 1 : status ))
fi
python3 scripts/fuzz_report.py --report "$report" --junit "$work/junit.xml" --seed "$seed" \
  --examples "$examples" --seconds $(( $(date +%s) - started )) --exit-status "$status" \
  --commit "$commit" --previous "$output" >"$written"
if [ "$status" != 0 ]; then
  cat "$written" >&2
  echo "fuzz.sh: the run failed (seed $seed, exit status $status); $output left as it was" >&2
  exit "$status"
fi
mkdir -p "$(dirname "$output")"
mv "$written" "$output"
echo "wrote $output (seed $seed, $examples examples per operation)"
