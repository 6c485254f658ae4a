#!/usr/bin/env bash
# zcp GPU check: one script, one GPU, under 8 minutes, nothing downloaded at run time.
#
#   bash scripts/gpu_check.sh                        # install (see below), then run every step
#   bash scripts/gpu_check.sh --no-install           # an environment prepared beforehand (--python PY)
#   bash scripts/gpu_check.sh --dry-run              # print every command, write a JSON of "dry-run" steps
#   bash scripts/gpu_check.sh --steps prepare,demo_gpu --out outputs/gpu_check_demo.json   # a subset
#
# Options: --out FILE (default outputs/gpu_check.json: the ONE JSON file of figures), --workdir DIR (default
# outputs/gpu_check: models, logs, per-step results), --budget S (default 470: seconds for all steps together,
# install excluded), --python PY, --venv DIR (default .venv-gpu), --wheels DIR (install offline from a folder
# of wheels), --vllm-spec SPEC (default vllm), --steps a,b,c, --dry-run, --no-install.
#
# Steps, each timed, its figures under steps.<name> of the JSON (scripts/gpu_check.py does the work; how to
# read the figures: docs/gpu_check.md):
#   environment          versions, the GPU
#   install              what the "Install" block below does (skipped with --no-install)
#   prepare              builds the models locally: a tiny Llama (2 x 128) and a mid one (8 layers x 512),
#                        each memorising half a toy benchmark; the shipped zcp/assets/base_model is used as is
#   hf_bf16_vs_cpu_fp32  hf backend bf16 on the GPU vs fp32 on the CPU: |diff| of log p, p_first, p_all over
#                        300 score requests; agreement of greedy zero-CoT answers
#   vllm_vs_hf           vLLM backend vs hf on the same GPU (fp32 and bf16), tolerance stated in the JSON
#   throughput           run_detect (vllm and hf) end to end vs vLLM's own raw throughput, units/s and ratios
#   grpo_vllm_colocate   3 GRPO steps with use_vllm colocate (conf/train/gpu_7b.yaml's GRPO on the mid model)
#   demo_gpu             train/run_demo.py (make demo's job) with the models on CUDA: Table 6/7, verdicts
# A step that cannot run (no CUDA, vLLM not installed, the time budget spent) is recorded as "skipped" with
# the reason; one that fails as "error" (with its log's tail) or "timeout"; the script itself never stops
# early and always writes the JSON.
#
# Install (unless --no-install): a fresh venv (--venv), then from PyPI (or --wheels DIR, offline):
#   pip install --upgrade pip; pip install "$VLLM_SPEC" (vLLM brings the CUDA torch it was built for);
#   the torch / transformers / tokenizers it brought are frozen as constraints, then pip install -e '.[dev]'
#   (zcp and its dependencies: transformers, trl, peft, hydra-core, ...). Install time is not part of the
#   8-minute budget. A GPU machine that can reach nothing outside needs --no-install with an environment
#   prepared beforehand (or --wheels with the wheels carried there).
#
# Ran on an H200 on 2026-12-04 with --no-install (docs/results/gpu_check.md: the whole check took 151 s of its
# budget, the demo 143 s); vLLM's steps have not run on a GPU yet (that image has no vLLM).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1

OUT=outputs/gpu_check.json
WORK=outputs/gpu_check
BUDGET=470
MIN_STEP=20          # a step is not started with less than this left of the budget
DRY=0
INSTALL=1
PY_ARG=""
VENV=.venv-gpu
WHEELS=""
VLLM_SPEC=vllm
STEPS_SEL=""

usage() { sed -n '2,13p' "$0"; }

while (($#)); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --python) PY_ARG=$2; shift 2 ;;
    --venv) VENV=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --vllm-spec) VLLM_SPEC=$2; shift 2 ;;
    --steps) STEPS_SEL=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then echo "gpu_check.sh: --budget must be whole seconds, not $BUDGET" >&2; exit 2; fi

# The Python the steps run with: --python, else the venv's (made by the install), else python3.
if [[ -n $PY_ARG ]]; then PY=$PY_ARG
elif ((INSTALL)) || [[ -x $VENV/bin/python ]]; then PY=$VENV/bin/python
else PY=python3
fi
# The report needs only the standard library: any python3 does when the venv is not there (dry run).
if [[ -x $PY ]] || command -v "$PY" >/dev/null 2>&1; then REPORT_PY=$PY; else REPORT_PY=python3; fi

# Nothing is downloaded at run time: the hubs are off, W&B is off.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false

mkdir -p "$WORK"
rm -f "$WORK/commands.tsv" "$WORK/status.tsv"
if ((!DRY)); then rm -rf "$WORK/steps" "$WORK/logs"; mkdir -p "$WORK/steps" "$WORK/logs"; fi

selected() { [[ -z $STEPS_SEL || ",$STEPS_SEL," == *",$1,"* ]]; }

write_skip() {  # write_skip NAME REASON: a result file for a step that is not run
  printf '{"status": "skipped", "reason": "%s"}\n' "${2//\"/\'}" >"$WORK/steps/$1.json"
}

record() {  # record NAME CAP COMMAND-TEXT
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/commands.tsv"
}

# ------------------------------------------------------------------------------------------ install
src=${WHEELS:+--no-index --find-links $WHEELS }
install_cmds=(
  "python3 -m venv $VENV"
  "$VENV/bin/python -m pip install -q --upgrade ${src}pip"
  "$VENV/bin/python -m pip install -q ${src}$VLLM_SPEC"
  "$VENV/bin/python -m pip freeze | grep -iE '^(torch|transformers|tokenizers)==' > $VENV/pins.txt"
  "$VENV/bin/python -m pip install -q ${src}-c $VENV/pins.txt -e '.[dev]'"
)
install_text=""
for c in "${install_cmds[@]}"; do install_text+="${install_text:+ && }$c"; done
record install 0 "$install_text"
if ((DRY)); then
  for c in "${install_cmds[@]}"; do echo "+ [install] $c"; done
  ((INSTALL)) || echo "  (--no-install: the install above would be skipped; Python: $PY)"
elif ((!INSTALL)); then
  write_skip install "--no-install: the environment of $PY was prepared beforehand"
elif ! selected install; then
  write_skip install "not selected (--steps $STEPS_SEL)"
else
  echo "== install (not counted in the ${BUDGET}s budget)"
  s0=$SECONDS
  rc=0
  for c in "${install_cmds[@]}"; do
    echo "+ $c" >>"$WORK/logs/install.log"
    bash -c "$c" >>"$WORK/logs/install.log" 2>&1 || { rc=$?; break; }
  done
  printf 'install\t%s\t%s\n' "$rc" "$((SECONDS - s0))" >>"$WORK/status.tsv"
  if ((rc == 0)); then
    printf '{"status": "ok", "figures": {"venv": "%s", "vllm_spec": "%s", "wheels": "%s"}}\n' \
      "$VENV" "$VLLM_SPEC" "$WHEELS" >"$WORK/steps/install.json"
  fi
  echo "   install: exit code $rc ($((SECONDS - s0)) s)"
fi

# ------------------------------------------------------------------------------------------ steps
T0=$SECONDS
step() {  # step NAME CAP [extra step options...]: scripts/gpu_check.py step NAME, under min(CAP, budget left)
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0)))
  local t=$((cap < left ? cap : left))
  ((DRY)) && t=$cap
  local cmd=("$PY" scripts/gpu_check.py step "$name" --workdir "$WORK" --result "$WORK/steps/$name.json"
             --timeout "$t" "$@")
  local text
  text=$(printf '%q ' "${cmd[@]}")
  record "$name" "$cap" "timeout -k 15 $t ${text% }"
  if ((DRY)); then echo "+ [$name, <= ${cap}s] timeout -k 15 $t ${text% }"; return 0; fi
  if ! selected "$name"; then write_skip "$name" "not selected (--steps $STEPS_SEL)"; return 0; fi
  if ((t < MIN_STEP)); then write_skip "$name" "time budget spent (${left}s left of ${BUDGET}s)"; return 0; fi
  echo "== $name (<= ${t}s)"
  local s0=$SECONDS rc=0
  timeout -k 15 "$t" "${cmd[@]}" >"$WORK/logs/$name.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - s0))" >>"$WORK/status.tsv"
  echo "   $(tail -n 1 "$WORK/logs/$name.log" 2>/dev/null) [exit $rc, $((SECONDS - s0)) s]"
}

# Time limits per step (seconds; estimates): the budget (--budget) caps their sum.
step environment 30
step prepare 60
step hf_bf16_vs_cpu_fp32 60
step vllm_vs_hf 120
step throughput 180
step grpo_vllm_colocate 120
step demo_gpu 240

# ------------------------------------------------------------------------------------------ report
report=("$REPORT_PY" scripts/gpu_check.py report --workdir "$WORK" --out "$OUT" --budget-s "$BUDGET")
if ((DRY)); then
  "${report[@]}" --dry-run
else
  "${report[@]}" --total-s "$((SECONDS - T0))"
fi
