#!/usr/bin/env bash
# Deep fuzzing: many more examples than the suite, with a random seed, on every operation of the API
# and on both backends (a throw-away PostgreSQL is started). Writes the counts to docs/fuzzing.md.
#   bash scripts/fuzz.sh                       # 500 examples per operation, a random seed
#   BATON_FUZZ_EXAMPLES=2000 BATON_FUZZ_SEED=42 bash scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/services.sh
. scripts/services.sh
start_postgres
export TMPDIR="$BATON_SERVICES_DIR/tmp"
mkdir -p "$TMPDIR" && chmod 755 "$TMPDIR"
examples=${BATON_FUZZ_EXAMPLES:-500}
seed=${BATON_FUZZ_SEED:-$(python3 -c 'import secrets; print(secrets.randbelow(2**32))')}
report="$TMPDIR/fuzz-report.jsonl"
started=$(date +%s)
status=0
BATON_HYPOTHESIS_PROFILE=deep BATON_FUZZ_EXAMPLES="$examples" BATON_FUZZ_REPORT="$report" \
  python -m pytest tests/test_fuzz.py tests/test_bad_input.py -p no:cacheprovider -q \
  --basetemp="$TMPDIR/pytest" --hypothesis-seed="$seed" --junitxml="$TMPDIR/junit.xml" || status=$?
python3 scripts/fuzz_report.py --report "$report" --junit "$TMPDIR/junit.xml" --seed "$seed" \
  --examples "$examples" --seconds $(( $(date +%s) - started )) --exit-status "$status" >docs/fuzzing.md
echo "wrote docs/fuzzing.md (seed $seed, exit status $status)"
exit "$status"
