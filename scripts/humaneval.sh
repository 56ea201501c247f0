#!/usr/bin/env bash
# HumanEval end to end on the embedded model (or HERMES_DEMO_PROVIDER): a small batch run whose
# samples are graded by HumanEval's tests (batch/verifiers/humaneval.py), then its pass rate.
# Everything lives in a temporary HERMES_HOME; the run folder is kept and named at the end.
#
#   bash scripts/humaneval.sh                 # 5 prompts x 2 attempts on the embedded SmolLM2-135M
#   HUMANEVAL_PROMPTS=20 HUMANEVAL_ATTEMPTS=4 bash scripts/humaneval.sh
#   HERMES_DEMO_VENV=/path/to/venv bash scripts/humaneval.sh   # default .venv
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SHARED=${HERMES_SHARED:-$ROOT/../shared}
[ -f "$SHARED/data/humaneval_tests.jsonl" ] || SHARED=/work/shared
DATA=$SHARED/data
[ -f "$DATA/humaneval_tests.jsonl" ] || { echo "humaneval.sh: no $DATA/humaneval_tests.jsonl; set HERMES_SHARED" >&2; exit 2; }
VENV=${HERMES_DEMO_VENV:-$ROOT/.venv}
export PATH=$VENV/bin:$PATH
PROVIDER=${HERMES_DEMO_PROVIDER:-local}
PROMPTS=${HUMANEVAL_PROMPTS:-5}
ATTEMPTS=${HUMANEVAL_ATTEMPTS:-2}
SYNTHETIC=""
[ "$PROVIDER" = scripted ] && SYNTHETIC=yes

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hermes-humaneval.XXXXXX")
export HERMES_HOME=$WORK/home HERMES_RUNTIME_DIR=$WORK/run
unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN ANTHROPIC_BASE_URL OPENAI_API_KEY 2>/dev/null || true
mkdir -p "$HERMES_HOME"
cat > "$HERMES_HOME/config.yaml" <<YAML
provider: $PROVIDER
toolsets: [terminal, file]
YAML
cleanup() {
  hermesctl shutdown >/dev/null 2>&1 || true
  if [ -n "${DAEMON_PID:-}" ]; then wait "$DAEMON_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
hermesd run >"$WORK/hermesd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do hermesctl status >/dev/null 2>&1 && break; sleep 0.1; done
hermesctl status >/dev/null || { echo "humaneval.sh: hermesd did not start: $(tail -n 1 "$WORK/hermesd.log")" >&2; exit 1; }

echo "== $PROMPTS HumanEval prompts x $ATTEMPTS attempts on provider $PROVIDER, graded by HumanEval's tests"
hermes-batch --dataset_file "$DATA/humaneval_prompts.jsonl" --batch_size 10 --run_name humaneval \
  --max_samples "$PROMPTS" --samples_per_prompt "$ATTEMPTS" --num_workers 2 --max_turns 6 --distribution no_web \
  --output_dir "$WORK/data" ${SYNTHETIC:+--allow_synthetic} \
  --verifier "$VENV/bin/python $ROOT/batch/verifiers/humaneval.py --tests $DATA/humaneval_tests.jsonl" || true
python3 - "$WORK/data/humaneval" <<'PY'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
stats = json.loads((run / "statistics.json").read_text())
r, g, p = stats["rewards"], stats["groups"], stats["prompts"]
print(f"samples: {p['total']} ({p['written']} written, {p['discarded_no_reasoning']} discarded, {p['failed']} failed)")
print(f"verified: {r['verified']}, passed: {r['passed']}, pass rate {r['pass_rate']:.1%}, mean reward {r['mean']}, "
      f"verifier errors {r['verifier_errors']}")
print(f"pass@1 {g['pass@1']}, pass@{g['samples_per_prompt']} {g['pass@k']} over {g['groups']} prompts")
PY
echo "run folder: $WORK/data/humaneval"
