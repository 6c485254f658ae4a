#!/usr/bin/env bash
# zcp real-model study: SmolLM2-135M-Instruct on GSM8K (the paper's Table 4 analogue with a control) and part (d).
#
#   bash scripts/real_model_study.sh --size small --out outputs/real_model_study_small    # the CPU check (minutes)
#   bash scripts/real_model_study.sh --size medium --out outputs/real_model_study_cpu      # CPU figures (~1 h, 2 cores)
#   bash scripts/real_model_study.sh --size full --out outputs/real_model_study --gen-batch 256 --budget 290  # GPU
#   bash scripts/real_model_study.sh --steps refs --size full --out outputs/real_model_study   # references only
#
# Options: --out DIR (default outputs/real_model_study), --size small|medium|full (default small), --budget S (seconds for
# all steps together, default 3600), --python PY (default .venv/bin/python, else python3), --steps a,b,c (default
# refs,table4,part_d,gsm8k_null), --gen-batch N (model.gen_batch_size and model.batch_size; default: the model
# config's), --with-con (part_d: con too; --size full only). Needs `make real-model` (model=smollm2-135m) and
# ../shared/data (GSM8K, the ZCP release). Nothing is downloaded (HF_HUB_OFFLINE=1, WANDB_MODE=disabled).
#
# Steps, each timed under min(its cap, budget left), outputs under <out>/<step>/, log <out>/<step>.log, status, exit
# code and wall time in <out>/steps.json as each ends; a step that fails or times out is recorded and the next runs:
#   refs        run_build_data reference.m=3 (GSM8K builder) (a) on the release's GSM8K-train originals, read in the
#               release layout (data.format=zcp_release data.variant=original: the solutions carry GSM8K's
#               calculator annotations), ids paraphrased_dataset-NNNNN paired by original_id; audited.jsonl and
#               paraphrased.jsonl written beside them (scripts/real_model_study.py prepare: why); (b) GSM8K test.
#               small: the first 20 rows of each; full: all 500 and all 1,319; medium: all 500 and the first
#               600 test rows (<out>/refs/<size>/). A build whose
#               reference.jsonl is already there is kept (build it here on the CPU and carry <out>/refs to a GPU machine).
#   table4      run_detect model=smollm2-135m on D (originals), D' (variant paraphrased) and the control (GSM8K
#               test), acc/con/p_first/p_all, m = 3, missing references skipped, probe.answer_space=both (SmolLM2
#               writes a space after the pre-fill on half its answers). Conventions probe.prefill=[probe,hash,
#               sentence_colon] with probe.primary=hash, declared before looking: SmolLM2's answers end on
#               `#### N` then `The answer is: N` (conf/model/smollm2-135m.yaml), the first line is `#### `, and a
#               declared primary costs no reading generation (auto reads 40 neutral full-CoT outputs and the
#               benchmark's) and cannot depend on the data. Then <out>/table4.md (real_model_study.py table4).
#               medium: p_first and p_all only (acc and con generate, hours on a CPU; acc is VOID on this model,
#               0% zero-CoT accuracy on GSM8K), and the declared primary convention `hash` alone (each
#               convention is another scoring pass: ~3 units/s on two cores with probe.answer_space=both).
#   part_d      run_calibration parts=[real_originals], models {smollm2: model.path} (chat template rendered,
#               probe built by run_detect's probe_config), no DiD, pools: the reserved word-problem pool and
#               ArithMark, the same conventions as table4, metrics [acc,p_first,p_all] (+con with --with-con).
#               full: sizes [50,100], null_pools 100; medium: sizes [50,100], 20 nulls, metrics [p_first,p_all],
#               prefills [hash];
#               small: pools of 30 items, sizes [10,20], 20 subsets, 5 nulls.
#   gsm8k_null  the shipped base model (model default) on part (d)'s gsm8k pool (GSM8K test, m = 3, the current
#               builder), sizes [10,20,50], metrics [p_first,p_all], null_pools 100; full: the first 600 test rows
#               (~60% get 3 draws; building all 1,319 costs 5 min of one CPU core), medium: as full with 20 nulls,
#               small: 60 rows, 5 nulls.
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
OUT=outputs/real_model_study; SIZE=small; BUDGET=3600; PY=""; STEPS=refs,table4,part_d,gsm8k_null; GEN=""; CON=0
while (($#)); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --gen-batch) GEN=$2; shift 2 ;;
    --with-con) CON=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "real_model_study.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $SIZE == small || $SIZE == medium || $SIZE == full ]] || {
  echo "real_model_study.sh: --size small|medium|full, not $SIZE" >&2; exit 2; }
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "real_model_study.sh: --budget must be whole seconds, not $BUDGET" >&2; exit 2; }
[[ -z $GEN || $GEN =~ ^[1-9][0-9]*$ ]] || { echo "real_model_study.sh: --gen-batch must be a positive integer" >&2; exit 2; }
for s in ${STEPS//,/ }; do
  case $s in refs|table4|part_d|gsm8k_null) ;; *) echo "real_model_study.sh: unknown step $s" >&2; exit 2 ;; esac
done
if [[ -z $PY ]]; then if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi; fi
export WANDB_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HYDRA_FULL_ERROR=1
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd); SJ=$OUT/steps.json; HELP=scripts/real_model_study.py
RELEASE=../shared/data/zcp-release/gsm8k_train/paraphrased_dataset.jsonl; TEST=../shared/data/gsm8k/test.jsonl
START=$(date +%s)
"$PY" - "$SJ" "$SIZE" "$BUDGET" "$STEPS" <<'EOF' || exit 1
import json, sys
json.dump({"size": sys.argv[2], "budget_s": int(sys.argv[3]), "selected": sys.argv[4].split(","), "steps": {}},
          open(sys.argv[1], "w"), indent=1)
EOF

if [[ $SIZE == small ]]; then
  LIM="data.limit=20"; PD_POOLS="real_originals.pools.wordproblem_pool.n=30 real_originals.pools.arithmark.n_per_stage=6"
  PD="real_originals.sizes=[10,20] real_originals.subsets=20 real_originals.null_pools=5"
  GN="real_originals.pools.gsm8k.n=60 real_originals.subsets=20 real_originals.null_pools=5"
elif [[ $SIZE == medium ]]; then
  LIM=""; PD_POOLS=""; PD="real_originals.sizes=[50,100] real_originals.null_pools=20"
  GN="real_originals.pools.gsm8k.n=600 real_originals.null_pools=20"
else
  LIM=""; PD_POOLS=""; PD="real_originals.sizes=[50,100] real_originals.null_pools=100"
  GN="real_originals.pools.gsm8k.n=600 real_originals.null_pools=100"
fi
T4_METRICS="[acc,con,p_first,p_all]"; TEST_LIM=""
[[ $SIZE == medium ]] && { T4_METRICS="[p_first,p_all]"; TEST_LIM="data.limit=600"; }
BATCH=""; [[ -n $GEN ]] && BATCH="model.gen_batch_size=$GEN model.batch_size=$GEN"
CONV="probe.prefill=[probe,hash,sentence_colon] probe.primary=hash"
PD_METRICS="[acc,p_first,p_all]"; [[ $SIZE == full && $CON == 1 ]] && PD_METRICS="[acc,con,p_first,p_all]"
PD_CONV="[probe,hash,sentence_colon]"
if [[ $SIZE == medium ]]; then  # one declared convention: three cost three times the scoring (~3 units/s here)
  PD_METRICS="[p_first,p_all]"; PD_CONV="[hash]"; CONV="probe.prefill=hash"
fi
REL=$OUT/refs/$SIZE/release; TST=$OUT/refs/$SIZE/test   # per size: a small build is never kept for full

build() {  # build DIR OVERRIDES...: run_build_data unless DIR/reference.jsonl is there
  local dir=$1; shift
  if [[ -s $dir/reference.jsonl ]]; then echo "kept $dir (reference.jsonl present)"; return 0; fi
  "$PY" evaluate/run_build_data.py "$@" reference=gsm8k reference.m=3 paraphrase=none logger=none $LIM output_dir="$dir"
}
step_refs() {
  build "$REL" data.format=zcp_release data.variant=original data.path=$RELEASE data.name=gsm8k_train_release &&
    "$PY" $HELP prepare --build "$REL" --release $RELEASE && build "$TST" data=gsm8k data.path=$TEST $TEST_LIM
}
step_table4() {
  "$PY" evaluate/run_detect.py model=smollm2-135m data.format=items data.name=gsm8k_train_release \
    data.path="$REL/audited.jsonl" data.reference_path="$REL/reference.jsonl" \
    data.variant_paths.paraphrased="$REL/paraphrased.jsonl" data.variant_format=zcp_release \
    data.control_path="$TST/items.jsonl" data.control_reference_path="$TST/reference.jsonl" \
    data.missing_reference=skip "probe.metrics=$T4_METRICS" $CONV probe.answer_space=both \
    $BATCH logger=none output_dir="$OUT/table4" &&
    "$PY" $HELP table4 --run "$OUT/table4" --out "$OUT/table4.md"
}
step_part_d() {
  "$PY" evaluate/run_calibration.py parts=[real_originals] model=smollm2-135m $BATCH logger=none \
    '~real_originals.models' '+real_originals.models={smollm2:${model.path}}' real_originals.base=null \
    '~real_originals.pools.gsm8k' $PD_POOLS $PD "real_originals.metrics=$PD_METRICS" \
    real_originals.prefills=$PD_CONV real_originals.records_root="$OUT/part_d/records" \
    output_dir="$OUT/part_d/run"
}
step_gsm8k_null() {
  "$PY" evaluate/run_calibration.py parts=[real_originals] logger=none \
    '~real_originals.models' '+real_originals.models={base_model:${zcp.asset:base_model}}' real_originals.base=null \
    '~real_originals.pools.wordproblem_pool' '~real_originals.pools.arithmark' real_originals.m=3 \
    real_originals.sizes=[10,20,50] 'real_originals.metrics=[p_first,p_all]' \
    'real_originals.pools.gsm8k.metrics=[p_first,p_all]' $GN \
    real_originals.records_root="$OUT/gsm8k_null/records" output_dir="$OUT/gsm8k_null/run"
}

declare -A CAP=([refs]=900 [table4]=3000 [part_d]=3000 [gsm8k_null]=1200)
for s in refs table4 part_d gsm8k_null; do
  [[ ",$STEPS," == *",$s,"* ]] || continue
  left=$((BUDGET - ($(date +%s) - START))); t=$((left < ${CAP[$s]} ? left : ${CAP[$s]}))
  if ((t < 10)); then
    "$PY" $HELP step --steps-json "$SJ" --name $s --rc -1 --seconds 0 --note "budget spent (${left}s left)"; continue
  fi
  echo "== $s (<= ${t}s) -> $OUT/$s.log"; mkdir -p "$OUT/$s"; t0=$(date +%s)
  # a function cannot run under timeout(1): the step runs in a child bash that gets the functions and variables
  export -f build step_$s; export PY HELP LIM REL TST RELEASE TEST OUT BATCH CONV PD PD_POOLS PD_METRICS GN T4_METRICS TEST_LIM PD_CONV
  timeout -k 15 "$t" bash -c "step_$s" >"$OUT/$s.log" 2>&1; rc=$?
  "$PY" $HELP step --steps-json "$SJ" --name $s --rc $rc --seconds $(($(date +%s) - t0)) \
    --note "log: $s.log" || true
  ((rc == 0)) || tail -n 5 "$OUT/$s.log"
done
echo "steps: $SJ"; cat "$SJ"
