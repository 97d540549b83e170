#!/usr/bin/env bash
# A runnable agent loop around noa, in bash: copy it, then put your provider's call in call_model.
#
# Every turn:  noa project (the view to send, and a JSON report) -> your model -> append the reply
#              -> if the reply called Compress: noa apply, append the panel as the tool result.
#
# The transcript is OpenAI Chat Completions JSONL (one message per line) and is the only record the
# host keeps: noa reads it every turn, keeps its own state in --state-dir and never writes it. Here
# the "model" is a scripted stand-in and the tools are fake, so the loop runs offline:
#
#     examples/agent_loop.sh --noa target/release/noa --turns 60 --limit 16k
#
# Needs bash 4.3+, jq and noa. Prints one summary line; exits non-zero if a request went over the
# window or a noa command failed unexpectedly.
set -euo pipefail

NOA=noa TURNS=60 LIMIT=16k STATE_DIR="" TRANSCRIPT=""
while (($#)); do
  case $1 in
    --noa) NOA=$2 ;;
    --turns) TURNS=$2 ;;
    --limit) LIMIT=$2 ;;
    --state-dir) STATE_DIR=$2 ;;
    --transcript) TRANSCRIPT=$2 ;;
    *) echo "usage: $0 [--noa PATH] [--turns N] [--limit TOKENS] [--state-dir DIR] [--transcript FILE]" >&2
       exit 2 ;;
  esac
  shift 2
done
command -v jq >/dev/null || { echo "agent_loop.sh needs jq on PATH" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/noa-loop-XXXXXX")
T=${TRANSCRIPT:-$WORK/session.jsonl}
COMMON=(--limit "$LIMIT")
[[ -n $STATE_DIR ]] && COMMON+=(--state-dir "$STATE_DIR")

# --- 1. THE MODEL CALL: replace call_model with your provider's --------------------------------
# It reads the view ($WORK/view.jsonl, one chat message per line: send them as `messages`,
# unchanged; a nudge, when there is one, is the last user message) and sets `reply` to the
# assistant message (one JSON line) and `input_tokens` to the provider's count of the request.
# With OpenAI Chat Completions, for example:
#
#   response=$(jq -sc --argjson tools "$TOOLS" '{model: "gpt-4.1", messages: ., tools: $tools}' \
#                "$WORK/view.jsonl" |
#              curl -sS https://api.openai.com/v1/chat/completions -d @- \
#                -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json")
#   reply=$(jq -c '.choices[0].message' <<<"$response")
#   input_tokens=$(jq '.usage.prompt_tokens' <<<"$response")
#
# A real model answers a nudge from its text. The stand-in below reads the same nudge as data
# from noa's JSON report ($REPORT): the Compress arguments it offers, with summaries to write.
STEP=0
call_model() {
  STEP=$((STEP + 1))
  local n=$STEP args
  if jq -e '.nudge != null' >/dev/null <<<"$REPORT"; then
    args=$(jq -c --arg topic "work before step $n" --arg summary "Steps up to $n: read the \
storage, cache and retry modules and ran their tests. The retry limit in src/retry.py was off by \
one; the fix is in and the tests pass. The public schema is unchanged because clients use it." \
      '.nudge.arguments | .topic = $topic | .content |= map(.summary = $summary)' <<<"$REPORT")
    reply=$(tool_call "cmp_$n" Compress "$args")
  elif ((n % 5 == 0)); then
    reply=$(jq -nc --arg c "Step $n: this module looks consistent." \
      '{role: "assistant", content: $c}')
  elif ((n % 3 == 0)); then
    reply=$(tool_call "call_$n" Bash "$(jq -nc --arg c "pytest -q tests/test_$((n % 7)).py" \
      '{command: $c}')")
  else
    reply=$(tool_call "call_$n" Read "$(jq -nc --arg p "src/module_$((n % 11)).py" '{path: $p}')")
  fi
  # A simulated provider: 3.5 characters a token over the view and the tool definitions.
  local view
  view=$(<"$WORK/view.jsonl")
  input_tokens=$(((${#view} + ${#TOOLS}) * 2 / 7 + 1))
}

tool_call() { # id name arguments-json
  jq -nc --arg id "$1" --arg name "$2" --arg args "$3" \
    '{role: "assistant", content: null,
      tool_calls: [{id: $id, type: "function", function: {name: $name, arguments: $args}}]}'
}

# --- 2. YOUR TOOLS: here fake ones whose output is made up from their arguments ----------------
FAKE_TOOLS='[
  {"type": "function", "function": {"name": "Read", "description": "Read a file.",
   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
  {"type": "function", "function": {"name": "Bash", "description": "Run a command.",
   "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
]'

run_fake_tool() { # name arguments-json
  local seed=0 i c s=$2
  for ((i = 0; i < ${#s}; i++)); do
    printf -v c '%d' "'${s:i:1}"
    seed=$(((seed * 31 + c) % 1000003))
  done
  if [[ $1 == Read ]]; then
    for ((i = 0; i < 40 + seed % 40; i++)); do
      printf '%4d  def handler_%d(request, retries=%d):  # cache lookup, then index\n' \
        $((i + 1)) $(((seed >> (i % 16)) % 997)) $((i % 5))
    done
  else
    for ((i = 0; i < 10 + seed % 20; i++)); do
      printf 'tests/test_%d.py::case_%d PASSED\n' $((seed % 7)) "$i"
    done
  fi
}

# --- 3. THE LOOP: keep this part ---------------------------------------------------------------
FAILURES=0
noa_failed() { FAILURES=$((FAILURES + 1)); echo "noa $1 failed (exit $2): $3" >&2; }
count_blocks() { # the panel's block lines, "  b3(T1)=m00002–m00041 → …"
  local n=0 line
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*b[0-9]+\(T[0-9]\)= ]] && n=$((n + 1))
  done <<<"$1"
  echo "$n"
}

# Once per session: noa's system-prompt block and its Compress tool definition.
PROMPT=$("$NOA" prompt)
TOOLS=$(jq -c --argjson compress "$("$NOA" prompt --tool-schema --for chat)" \
  '[$compress] + .' <<<"$FAKE_TOOLS")
if [[ -s $T ]]; then # an existing transcript is carried on, with fresh call ids
  mapfile -t lines <"$T"
  STEP=${#lines[@]}
else
  jq -nc --arg p "$PROMPT" '{role: "system", content: ("You are a coding agent.\n\n" + $p)}' >>"$T"
  jq -nc '{role: "user", content: "Task: the retry logic gives up one attempt early. Find out why and fix it. Do not change the public schema."}' >>"$T"
fi

turns=0 nudges=0 blocks=0 rejected=0 peak=0 over=0
input_tokens="" # the provider's count of the previous request; none before the first
for ((turn = 1; turn <= TURNS; turn++)); do
  code=0
  "$NOA" project "$T" -o "$WORK/view.jsonl" --report json --input-tokens "$input_tokens" \
    "${COMMON[@]}" 2>"$WORK/report.txt" || code=$?
  if ((code != 0)); then
    noa_failed project "$code" "$(<"$WORK/report.txt")"
    break
  fi
  mapfile -t lines <"$WORK/report.txt"
  REPORT=${lines[-1]} # --report json: one line, after any warnings
  read -r request window < <(jq -r '"\(.request) \(.window)"' <<<"$REPORT")
  turns=$turn
  peak=$((request * 100 / window > peak ? request * 100 / window : peak))
  over=$((over + (request > window)))
  jq -e '.nudge != null' >/dev/null <<<"$REPORT" && nudges=$((nudges + 1))

  call_model
  echo "$reply" >>"$T"
  while IFS=$'\t' read -r id name args; do
    if [[ $name != Compress ]]; then
      result=$(run_fake_tool "$name" "$args")
    else # noa reads the call from the transcript; its panel is the tool result
      code=0
      result=$("$NOA" apply "$T" --call-id "$id" "${COMMON[@]}" 2>"$WORK/apply.txt") || code=$?
      case $code in
        0) blocks=$((blocks + $(count_blocks "$result"))) ;;
        1) rejected=$((rejected + 1)) # the panel says why; an error result for the model
           result="Error: Compress was rejected; nothing changed."$'\n'"$result" ;;
        *) noa_failed apply "$code" "$(<"$WORK/apply.txt")"
           result=$(<"$WORK/apply.txt") ;;
      esac
      echo "turn $turn: ${result%%$'\n'*}" >&2
    fi
    jq -nc --arg id "$id" --arg c "$result" '{role: "tool", tool_call_id: $id, content: $c}' >>"$T"
  done < <(jq -r '.tool_calls[]? | [.id, .function.name, .function.arguments] | @tsv' <<<"$reply")
  if jq -e '(.tool_calls // []) == []' >/dev/null <<<"$reply"; then # the user speaks next
    jq -nc '{role: "user", content: "Good. Go on with the next module."}' >>"$T"
  fi
  ((FAILURES == 0)) || break
done

echo "turns=$turns nudges=$nudges blocks_created=$blocks rejected_calls=$rejected peak=$peak%" \
  "limit=$LIMIT over_window=$over noa_failures=$FAILURES transcript=$T"
((over == 0 && FAILURES == 0))
