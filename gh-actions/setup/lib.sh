# Shared by the headwater actions' steps: `source "$GITHUB_ACTION_PATH/../setup/lib.sh"`.
#
# The actions pass their inputs to steps through environment variables (HW_*), never by
# pasting ${{ inputs.x }} into a script, so an input can not inject shell code.

# The CLI of the Python environment headwater was installed into; `python -m headwater.cli`
# works even when that environment's bin directory is not on PATH.
hw() {
  "${HW_PYTHON:-python3}" -m headwater.cli "${HW_CONNECTION[@]}" "$@"
}

# A yes/no input: true for true/yes/1 in any case.
hw_true() {
  # A boolean input: true/yes/on/1 in any case is true; false/no/off/0 or empty is false.
  # Anything else fails the step: a typo must not quietly mean "false".
  case "${1,,}" in
    true | yes | on | 1) return 0 ;;
    false | no | off | 0 | "") return 1 ;;
    *)
      echo "::error::'$1' is not a boolean input value: use true or false" >&2
      exit 1
      ;;
  esac
}

# Connection flags from the connection inputs; an empty server leaves the CLI to $NATS_URL.
HW_CONNECTION=()
if [[ -n "${HW_SERVER:-}" ]]; then HW_CONNECTION+=(--server "$HW_SERVER"); fi
if [[ -n "${HW_CREDENTIALS:-}" ]]; then HW_CONNECTION+=(--creds "$HW_CREDENTIALS"); fi
if [[ -n "${HW_USER:-}" ]]; then HW_CONNECTION+=(--user "$HW_USER"); fi
# Secrets go to the CLI through its environment (it reads NATS_PASSWORD and NATS_TOKEN), never
# argv: a process's arguments are readable by every other process on the runner.
if [[ -n "${HW_PASSWORD:-}" ]]; then export NATS_PASSWORD="$HW_PASSWORD"; fi
if [[ -n "${HW_TOKEN:-}" ]]; then export NATS_TOKEN="$HW_TOKEN"; fi
if [[ -n "${HW_NKEY:-}" ]]; then HW_CONNECTION+=(--nkey "$HW_NKEY"); fi
if [[ -n "${HW_TLS_CERT:-}" ]]; then HW_CONNECTION+=(--tlscert "$HW_TLS_CERT"); fi
if [[ -n "${HW_TLS_KEY:-}" ]]; then HW_CONNECTION+=(--tlskey "$HW_TLS_KEY"); fi
if [[ -n "${HW_TLS_CA:-}" ]]; then HW_CONNECTION+=(--tlsca "$HW_TLS_CA"); fi
if hw_true "${HW_TLS_FIRST:-}"; then HW_CONNECTION+=(--tlsfirst); fi
if [[ -n "${HW_JS_DOMAIN:-}" ]]; then HW_CONNECTION+=(--js-domain "$HW_JS_DOMAIN"); fi
if [[ -n "${HW_TIMEOUT:-}" ]]; then HW_CONNECTION+=(--timeout "$HW_TIMEOUT"); fi

# `-f PATH` for every whitespace-separated path in HW_FILES (files or directories).
hw_file_args() {
  local path
  HW_FILE_ARGS=()
  for path in ${HW_FILES:-}; do
    HW_FILE_ARGS+=(-f "$path")
  done
  if ((${#HW_FILE_ARGS[@]} == 0)); then
    echo "::error title=headwater::the files input names no file or directory"
    return 1
  fi
}

# `--owner NAME` (the owner input, else github:<owner>/<repository> of the workflow, which every
# runner sets), and `--adopt` when the adopt input is true.
hw_owner_args() {
  local owner="${HW_OWNER:-}"
  if [[ -z "$owner" && -n "${GITHUB_REPOSITORY:-}" ]]; then owner="github:$GITHUB_REPOSITORY"; fi
  if [[ -z "$owner" ]]; then
    echo "::error title=headwater::the owner input is empty and GITHUB_REPOSITORY is not set"
    return 1
  fi
  HW_OWNER_ARGS=(--owner "$owner")
  if hw_true "${HW_ADOPT:-}"; then HW_OWNER_ARGS+=(--adopt); fi
}

# A scratch directory for this step.
hw_workdir() {
  mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/headwater.XXXXXX"
}

# Set a step output from a string; the name<<DELIMITER form keeps multi-line values whole.
hw_output() {
  local name="$1" value="$2" delimiter
  delimiter="HEADWATER_EOF_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
  {
    printf '%s<<%s\n' "$name" "$delimiter"
    printf '%s\n' "$value"
    printf '%s\n' "$delimiter"
  } >>"$GITHUB_OUTPUT"
}

# Set a step output from a file's content (without its final newline).
hw_output_file() {
  local content
  content="$(cat "$2")"
  hw_output "$1" "$content"
}

# The plan markdown for a pull-request comment: a hidden marker first, so a workflow can find
# and update its earlier comment, and cut below GitHub's 65,536-character comment limit.
HW_COMMENT_MARKER="<!-- headwater-plan -->"
HW_COMMENT_LIMIT=60000
hw_comment_markdown() {
  local text
  text="$(cat "$1")"
  if ((${#text} > HW_COMMENT_LIMIT)); then
    text="${text:0:HW_COMMENT_LIMIT}"
    text="${text%$'\n'*}"
    text+=$'\n\n''*The plan is too long for a comment and was cut; the job summary has all of it.*'
  fi
  printf '%s\n%s' "$HW_COMMENT_MARKER" "$text"
}
