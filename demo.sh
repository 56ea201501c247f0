#!/usr/bin/env bash
# The main job, end to end, on a fresh machine: install hermesd with its embedded
# default model (SmolLM2-135M through llama.cpp: no key, no network), start the
# daemon, hand it real delegations, show their completion notifications, and stop
# it cleanly.  Everything lives in a temporary HERMES_HOME; nothing else is touched.
#
#   bash demo.sh            # install + run
#   HERMES_DEMO_PROVIDER=scripted bash demo.sh   # quick, synthetic run
#   HERMES_DEMO_VENV=/path/to/venv bash demo.sh  # use that virtual environment (default .venv)
#
# It checks itself: it exits non-zero with a one-line reason ("demo.sh: FAILED: ...") when no
# delegation completed, when the fourth background delegation was not refused at the cap, when
# no completion reached the session, or when the batch wrote no trajectory.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
SHARED=${HERMES_SHARED:-$ROOT/../shared}
[ -f "$SHARED/data/humaneval_prompts.jsonl" ] || SHARED=/work/shared
[ -f "$SHARED/data/humaneval_prompts.jsonl" ] || {
  echo "demo.sh: the HumanEval prompts are not in ../shared/data; set HERMES_SHARED to the folder that holds data/" >&2
  exit 2
}
PROVIDER=${HERMES_DEMO_PROVIDER:-local}
SYNTHETIC=""  # the scripted provider's samples are synthetic: trajectories.jsonl takes them only when asked
[ "$PROVIDER" = scripted ] && SYNTHETIC=yes
VENV=${HERMES_DEMO_VENV:-$ROOT/.venv}

fail() { echo "demo.sh: FAILED: $*" >&2; exit 1; }

EXTRA='[local]'
[ "$PROVIDER" = local ] || EXTRA=''
# An environment that already has hermesd (and a llama.cpp that fits this CPU) is used as it is.
if [ ! -x "$VENV/bin/hermesd" ] || { [ -n "$EXTRA" ] && ! "$VENV/bin/python" -m child.providers.llama_build >/dev/null 2>&1; }; then
  echo "== installing hermesd${EXTRA:+ and the embedded model} into $VENV (the first build of llama.cpp takes ~10 min)"
  bash scripts/install-venv.sh "$VENV" "$EXTRA"
fi
export PATH=$VENV/bin:$PATH

DEMO=$(mktemp -d "${TMPDIR:-/tmp}/hermes-demo.XXXXXX")
export HERMES_HOME=$DEMO/home HERMES_RUNTIME_DIR=$DEMO/run
unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN ANTHROPIC_BASE_URL OPENAI_API_KEY 2>/dev/null || true
mkdir -p "$HERMES_HOME" "$DEMO/work"
# The scripted provider answers at once: a second per step keeps the first three delegations
# running while the fourth is sent, so the cap is really reached.
[ "$PROVIDER" != scripted ] || export HERMES_SCRIPTED_STEP_SECONDS=${HERMES_SCRIPTED_STEP_SECONDS:-2}
cat > "$HERMES_HOME/config.yaml" <<YAML
provider: $PROVIDER
toolsets: [terminal, file]
delegation:
  max_async_children: 3
  max_turns: 4
  child_timeout_seconds: 300
YAML

cleanup() {
  hermesctl shutdown >/dev/null 2>&1 || true
  if [ -n "${DAEMON_PID:-}" ]; then wait "$DAEMON_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

echo "== starting hermesd (state in $HERMES_HOME, sockets in $HERMES_RUNTIME_DIR)"
hermesd run >"$DEMO/hermesd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do hermesctl status >/dev/null 2>&1 && break; sleep 0.1; done
hermesctl status || fail "hermesd did not start: $(tail -n 1 "$DEMO/hermesd.log")"

cd "$DEMO/work"
echo
echo "== three background delegations (the cap is 3) and a fourth, rejected at the cap"
PROMPT=$(head -n 1 "$SHARED/data/humaneval_prompts.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"])')
IDS=()
IDS+=("$(hermesctl delegate --background --json "$PROMPT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
IDS+=("$(hermesctl delegate --background --json "Run the command 'uname -a' with the terminal tool and report the kernel name." | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
IDS+=("$(hermesctl delegate --background --json "Write the word hello to a file named hello.txt with the file tool." | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
printf '   dispatched %s\n' "${IDS[@]}"
set +e
hermesctl delegate --background "one too many"
FOURTH=$?
set -e
[ "$FOURTH" = 4 ] || fail "the fourth background delegation was not refused at the cap (hermesctl exit status $FOURTH, not 4 = capacity_reached)"
echo "   (exit status $FOURTH = capacity_reached)"
hermesctl ps

echo
echo "== waiting for the completions"
COMPLETED=0
for id in "${IDS[@]}"; do
  if hermesctl wait "$id" >/dev/null; then COMPLETED=$((COMPLETED + 1)); fi
done
echo "   $COMPLETED of ${#IDS[@]} completed"
echo
echo "== completion notifications (async_delegation events)"
hermesctl events --type async_delegation

echo
echo "== a persistent session: one turn, then a background delegation from it"
hermesctl send main "Say hello in one short sentence." --wait || true
BG=$(hermesctl send main --json "/background Run the command 'date' with the terminal tool and report the date." | python3 -c 'import json,sys; print(json.load(sys.stdin)["delegation_id"])')
echo "   /background dispatched $BG; its result returns to the session as a new turn when idle"
hermesctl wait "$BG" >/dev/null || true
DELIVERED=
for _ in $(seq 600); do
  if hermesctl history main --json | grep -q "\"notification\": \"$BG\""; then DELIVERED=yes; break; fi
  sleep 0.5
done
echo
hermesctl history main

echo
echo "== a batch run: 4 HumanEval prompts, 2 at a time, trajectories for fine-tuning"
hermes-batch --dataset_file "$SHARED/data/humaneval_prompts.jsonl" --batch_size 2 --run_name humaneval_demo \
  --max_samples 4 --num_workers 2 --max_turns 4 --output_dir "$DEMO/data" \
  ${SYNTHETIC:+--allow_synthetic} || true
ls -la "$DEMO/data/humaneval_demo" || true
TRAJECTORIES=$(python3 - "$DEMO/data/humaneval_demo" <<'PY'
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
try:
    stats = json.loads((run / "statistics.json").read_text())
    print("statistics.json:", json.dumps({k: stats[k] for k in list(stats)[:8]}, indent=None)[:600], file=sys.stderr)
    lines = (run / "trajectories.jsonl").read_text().splitlines()
except (OSError, ValueError) as exc:
    print(f"   ({exc})", file=sys.stderr)
    lines = []
if lines:
    first = json.loads(lines[0])
    print(f"trajectories.jsonl: {len(lines)} line(s); first: prompt_index={first['prompt_index']}, "
          f"{len(first['conversations'])} turns, completed={first['completed']}, api_calls={first['api_calls']}",
          file=sys.stderr)
print(len(lines))
PY
)

echo
echo "== files the subagents left in $DEMO/work"
if [ -n "$(ls -A "$DEMO/work")" ]; then ls -la "$DEMO/work"; else
  case $PROVIDER in
    scripted) echo "   (none this time: the scripted provider replays canned steps, none of which writes a file)" ;;
    local) echo "   (none this time: the embedded toy model answered without writing the files it was asked for)" ;;
    *) echo "   (none this time: the model of provider $PROVIDER answered without writing the files it was asked for)" ;;
  esac; fi
echo
echo "== stopping hermesd"
hermesctl shutdown
wait "$DAEMON_PID"; echo "   hermesd exited with status $?"
DAEMON_PID=
echo "demo state kept in $DEMO"

[ "$COMPLETED" -gt 0 ] || fail "none of the ${#IDS[@]} background delegations completed (see hermesctl logs ID, state in $DEMO)"
[ -n "$DELIVERED" ] || fail "the /background completion ($BG) never reached the session main"
[ "$TRAJECTORIES" -gt 0 ] || fail "the batch wrote no trajectory ($DEMO/data/humaneval_demo/trajectories.jsonl)"
echo "demo.sh: OK: $COMPLETED of ${#IDS[@]} delegations completed, the fourth was refused at the cap, the /background result reached the session, the batch wrote $TRAJECTORIES trajectories"
