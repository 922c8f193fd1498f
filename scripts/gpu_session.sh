#!/usr/bin/env bash
# One batched session on the GPU machine: GPU tests, the suite on cupy, benchmarks, trainer runs.
#   bash scripts/gpu_session.sh STAGE [STAGE...]   stages: info nvrtc tests tests-all suite envbench env31 env31-torch env31-sticky env31-workers draw-cost envprof envprof-gen env-readout step-grpo-readout step-grpo-compile sampler sampler-attn sampler-xla decode-prof decode-prof-compact kenv kenv-patched env31-patched kenv-fix train experiment gen lag-exp validate step-speed step-speed-mt step-speed-rest step-speed-cudec step-speed-preempt step-speed-compact step-speed-grpo step-speed-trace draft-potential step-speed-spec step-speed-prefill step-speed-mesh ray host-reach
# Writes logs under $OUT (or ./gpu_out); each stage has its own time limit so one hang costs little.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu_out}"; mkdir -p "$OUT"
EXCLUDES="$PWD/scripts/runs_tar_excludes.txt"  # what an experiment's runs leave out when packed
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
stage() {  # stage NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - t0 ))s"; tail -n "${TAIL:-25}" "$OUT/$name.log"
}
sft_policy() {  # runs/gen/policy: the repository's SFT policy (artifacts/policies/), unpacked once
  mkdir -p runs/gen && [ -f runs/gen/policy/config.json ] || tar xzf artifacts/policies/gen-2026-12-04/policy.tar.gz -C runs/gen
}
patched_tree() {  # /tmp/patched: a copy of this tree with patches/0*.patch applied in order
  rm -rf /tmp/patched && mkdir -p /tmp/patched && cp -r . /tmp/patched/ \
    && (cd /tmp/patched && for p in patches/0*.patch; do patch -p1 -s < "$p" || echo "PATCH FAILED: $p"; done)
}
for s in "$@"; do
  case $s in
    info) stage info 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import jax,cupy,optax,orbax.checkpoint as o,transformers,torch;print(jax.__version__,jax.devices(),cupy.__version__,optax.__version__,transformers.__version__,torch.__version__)"' ;;
    tests) stage tests ${TESTS_S:-480} python3 -m pytest -q -rfE --durations=12 --timeout=200 -p no:cacheprovider \
             -m "gpu or parity" tests ;;
    tests-all) stage tests-all 540 python3 -m pytest -q --timeout=300 -p no:cacheprovider tests ;;
    suite) stage suite 300 python3 -m kernels_env check-suite --backend cupy ;;
    envbench) stage envbench ${ENVBENCH_S:-300} python3 benchmarks/env_throughput.py ${ENVBENCH_ARGS:-} ;;
    env31)  # issue 31: before (.bench_before, carried: `git archive <commit> kernels_env | tar -x -C .bench_before`)
      # / after on the suite and the mix, with the independent clock (317 s on an H100:
      # docs/results/env-throughput/2026-12-05_h100_2/)
      stage env31-ab ${ENVBENCH_S:-420} python3 benchmarks/env_throughput.py --before-src .bench_before \
        --workloads suite,mix --repeat 2 --arm-timeout 150 --independent-hold ;;
    env31-torch)  # issue 31: do the ~2.5 ms-high first-sight windows go with the torch baseline off? The
      # suite with this tree as both arms, per setting; every evaluation against the independent clock
      # (docs/results/env-clock/2026-12-05_h100/)
      for t in 0 1; do
        stage env31-torch$t ${ENVBENCH_S:-220} env LEAP_TORCH_BASELINE=$t python3 benchmarks/env_throughput.py \
          --before-src . --workloads suite --repeat 2 --arm-timeout 90 --independent-hold
      done ;;
    env31-workers)  # issue 31: the suite's steady rate against exec workers per GPU (the pool's default 3): a
      # worker's evaluation takes ~450 ms in the pool against ~120 ms alone while the exclusive timing
      # window fills only ~0.37 of the GPU's time (docs/results/step-time/2026-12-06_h100_2/)
      for w in ${ENV_WORKERS:-3 6}; do
        stage env31-workers$w ${ENVBENCH_S:-200} python3 benchmarks/env_throughput.py --workloads gen,suite,mix \
          --repeat 2 --no-independent --arm-timeout 90 --exec-workers-per-gpu $w
      done ;;
    env31-sticky)  # a mix whose failures are all sticky faults, before (.bench_before) / after: what the spares
      # save (one arm took 138 s on an H100)
      stage env31-sticky 420 python3 benchmarks/env_throughput.py --before-src .bench_before --workloads mix \
        --fail-kinds illegal --repeat 2 --no-independent --arm-timeout 200 --json ;;
    draw-cost)  # issue 31: what a timed run's input draw, copy, poison and counts cost, step by step
      stage draw-cost 90 python3 benchmarks/input_draw_cost.py ;;
    envprof) stage envprof ${ENVPROF_S:-120} python3 benchmarks/env_stage_profile.py ${ENVPROF_ARGS:-} ;;
    envprof-gen)  # issue 29/31: where a correctness-only evaluation of the generated family goes (GRPO waits on it)
      stage envprof-gen 150 python3 benchmarks/env_stage_profile.py --generated 64 ;;
    sampler) stage sampler 230 python3 benchmarks/sampler_throughput.py ;;
    sampler-attn)  # issue 4: the fused cuDNN decode attention against the two-gemm default, HF in the same run
      stage sampler-attn ${SAMPLER_S:-240} python3 benchmarks/sampler_throughput.py ${SAMPLER_ARGS:---batches 64,256 \
        --variants unrolled-threefry-einsum,unrolled-threefry-cudnn,unrolled-threefry-dpa} ;;
    nvrtc) stage nvrtc 60 python3 -c "
from cupy_backends.cuda.libs import nvrtc
from kernels_env.build.compile import nvrtc_options, compile_cuda
src = 'extern \"C\" __global__ void k(float* y){ y[threadIdx.x] = 1.f; }'
p = nvrtc.createProgram(src, 'k.cu', [], []); nvrtc.compileProgram(p, nvrtc_options('sm_90'))
print('nvrtc', nvrtc.getVersion(), 'log:', repr(nvrtc.getProgramLog(p)))
print('resources:', compile_cuda(src, 'sm_90').resources)" ;;
    kenv-fix) stage kenv-fix 240 python3 -m pytest -q -rfE -m gpu --timeout=150 -p no:cacheprovider tests/kernels_env/test_counter_rng.py tests/kernels_env/test_broken_corpus.py tests/kernels_env/test_cupy_backend.py ;;
    kenv-patched)  # the kenv tests plus the patches' own tests on a copy of this tree with patches/0*.patch applied
      # in order (GPU-untested changes wait there until this passes)
      # (GPU-untested changes wait there until this passes); the timing cheats as real CUDA code too
      patched_tree
      files=$(cd /tmp/patched && ls tests/kernels_env/test_{counter_rng,broken_corpus,cupy_backend,pool,pool_spares,pipeline,timing_cheats}.py; \
              grep -ho '^+++ b/tests/.*\.py' patches/0*.patch | cut -c7- | sort -u)
      stage kenv-patched 360 bash -c "cd /tmp/patched && PYTHONPATH=/tmp/patched python3 -m pytest -q -rfE -m gpu --timeout=120 -p no:cacheprovider $(echo $files)" ;;
    env31-patched)  # issue 31: the patched tree (after) against this tree (before), suite and mix, with the
      # independent clock: what the waiting patches do to throughput
      patched_tree
      stage env31-patched ${ENVBENCH_S:-420} bash -c "cd /tmp/patched && PYTHONPATH=/tmp/patched python3 benchmarks/env_throughput.py \
        --before-src $PWD --workloads suite,mix --repeat 2 --arm-timeout 150 --independent-hold" ;;
    kenv)  # the environment's GPU tests: backend, pool, pipeline, the broken and hostile corpora, the draws,
      # timing cheats, the expected cache
      stage kenv 480 python3 -m pytest -q -rfE -m gpu --timeout=120 -p no:cacheprovider tests/kernels_env/test_counter_rng.py \
        tests/kernels_env/test_broken_corpus.py tests/kernels_env/test_cupy_backend.py tests/kernels_env/test_pool.py \
        tests/kernels_env/test_pipeline.py tests/kernels_env/test_hostile_corpus.py tests/kernels_env/test_input_domains.py \
        tests/kernels_env/test_timing_cheats.py tests/kernels_env/test_expected_cache.py tests/kernels_env/test_trial_readout.py \
        tests/kernels_env/test_host_isolation.py ;;
    env-readout)  # issue 29/31: a trial's checks read back once and inputs judged by checksums (this tree)
      # against .bench_before (carried: `git archive <commit> kernels_env | tar -x -C .bench_before`): the
      # generated family correctness-only (RL's configuration), the suite and the mix, no independent clock
      stage env-readout ${ENVBENCH_S:-330} python3 benchmarks/env_throughput.py --before-src .bench_before \
        --workloads ${ENV_READOUT_WORKLOADS:-gen,suite,mix} --repeat 2 --no-independent --arm-timeout 100 ;;
    step-grpo-readout)  # issue 29: GRPO's step with the inputs judged by checksums (default) against the
      # regenerated inputs (env.input_checksums=false), the real SFT policy, alone on the GPU
      sft_policy
      stage step-grpo-readout ${STEP_GRPO_S:-240} python3 benchmarks/step_time.py --config configs/generated/grpo.yaml \
        --arms after --arm 'regen: env.input_checksums=false' --steps 4 --warmup 1 ;;
    step-grpo-compile)  # issue 29: is GRPO's evaluation wait NVRTC's? The step with 12 compile workers (the
      # config's), 15 and 8, with the update one step behind (rollout.update_lag=1: the last evaluations
      # run while the next step generates), and with a call ending once half its rows still generate
      # (their evaluations start sooner); the table's env stage rows sum each stage's seconds over the evaluations
      sft_policy
      stage step-grpo-compile ${STEP_GRPO_S:-420} python3 benchmarks/step_time.py --config configs/generated/grpo.yaml \
        --arms after,lag1 --arm 'cw15: env.compile_workers=15' --arm 'cw8: env.compile_workers=8' \
        --arm 'pre50: rollout.preempt=0.5' --steps 4 --warmup 1 ;;
    decode-prof)  # issue 29: where a decode step of the generated family's shape goes (batch 128, a multi-turn
      # cache), kernel families per step: einsum against the cuDNN decode attention, and under XLA command buffers
      P='--shape generated --batch 128 --prompt 1024 --new 768 --top 20'
      stage decode-prof 240 python3 benchmarks/decode_profile.py $P \
        --variants 'einsum:steps_per_iter=4' 'cudec:steps_per_iter=4,attention=cudnn'
      XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1" \
        stage decode-prof-graphs 150 python3 benchmarks/decode_profile.py $P --variants 'cudec-graphs:steps_per_iter=4,attention=cudnn' ;;
    decode-prof-compact)  # issue 29: live-row compaction at the decode level: 128 rows whose lengths are about
      # geometric (8 stop ids of a 1949-token vocabulary: mean ~240 tokens, ~4% run to 768), cuDNN attention
      stage decode-prof-compact 200 python3 benchmarks/decode_profile.py --shape generated --batch 128 --prompt 1024 \
        --new 768 --top 8 --stop-ids 8 --variants 'full:steps_per_iter=4,attention=cudnn' \
        'compact4:steps_per_iter=4,attention=cudnn,compact_factor=4' 'compact2:steps_per_iter=4,attention=cudnn,compact_factor=2' ;;
    sampler-xla)  # the decode loop under XLA command buffers (CUDA graphs incl. WHILE) vs default
      V=unrolled-threefry-einsum,unrolled-threefry-einsum-k4,unrolled-threefry-einsum-cond
      stage sampler-xla-default 150 python3 benchmarks/sampler_throughput.py --no-torch --batches 64 --variants $V
      XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1" \
        stage sampler-xla-while 150 python3 benchmarks/sampler_throughput.py --no-torch --batches 64 --variants unrolled-threefry-einsum,unrolled-threefry-einsum-k4 ;;
    train) stage train-leap 150 python3 -m leap_jax.main --config configs/leap.yaml train.steps=2 rollout.scripted_mix.enabled=true
           stage train-mt 150 python3 -m leap_jax.main --config configs/multiturn.yaml train.steps=2 rollout.scripted_mix.enabled=true ;;
    experiment|gen)  # SFT policy (or the carried EXP_OUT/policy) + arms, within EXP_S seconds; `gen` runs the
      # generated-task family (configs/generated, OUT runs/gen). Brings back the policy as <=15 MiB tar parts
      # and every run's metrics/report as one tarball
      EXP_S=${EXP_S:-540}
      if [ "$s" = gen ]; then
        EXP_OUT=${EXP_OUT:-runs/gen}
        base_args="--config-dir configs/generated --sft-config configs/generated/bootstrap_sft.yaml --metric heldout/acc@1"
      else
        EXP_OUT=${EXP_OUT:-runs/experiment}; base_args=""
      fi
      had_policy=$([ -f "$EXP_OUT/policy/config.json" ] && echo 1 || echo 0)
      stage "$s" "$EXP_S" python3 -m leap_jax.experiment --out "$EXP_OUT" --budget-s $((EXP_S - 20)) $base_args ${EXP_ARGS:-}
      if [ -d "$EXP_OUT/policy" ] && [ "$had_policy" = 0 ]; then  # a carried policy is not sent back
        tar cf - -C "$EXP_OUT" policy | split -b 15M - "$OUT/policy.tar.part-"
      fi
      (cd "$EXP_OUT" && tar czf "$OUT/${s}_runs.tgz" --exclude-from="$EXCLUDES" .) ;;
    lag-exp)  # issue 29: does rollout.update_lag learn as well? grpo and grpo_lag from the repository's SFT
      # policy, launched together so they share the GPU alike (seeds LAG_SEEDS, default 0; LAG_PARALLEL runs
      # at once, default 2; LAG_OVERRIDES for every run, e.g. train.time_budget_s=300); call again while the
      # machine is held to continue the runs (runs/lag stays on it); brings back lag_runs.tgz. Seed 0 at the
      # configs' 600 s took four calls, ~1,400 s of lease (docs/results/update-lag/2026-12-07_h100/)
      sft_policy
      EXP_S=${EXP_S:-540}
      # the shared start evaluation of this policy (~80 s) from the results page, where it measured this path
      # (only under train.* overrides: others may change what it measured, and every run would refuse it)
      SEEDED=docs/results/update-lag/2026-12-07_h100/runs/start_eval
      NON_TRAIN=$(for o in ${LAG_OVERRIDES:-}; do case $o in train.*) ;; *) echo "$o" ;; esac; done)
      if [ -z "$NON_TRAIN" ] && [ ! -f runs/lag/start_eval/start_eval.json ] && grep -q "\"policy\": \"$PWD/runs/gen/policy\"" "$SEEDED/start_eval.json"; then
        mkdir -p runs/lag && cp -r "$SEEDED" runs/lag/start_eval && echo "lag-exp: start evaluation reused from $SEEDED"
      fi
      stage lag-exp "$EXP_S" python3 -m leap_jax.experiment --out runs/lag --budget-s $((EXP_S - 20)) \
        --config-dir configs/generated --metric heldout/acc@1 --arms grpo,grpo_lag --seeds "${LAG_SEEDS:-0}" --compare grpo_lag/grpo --lower-targets 1/256,2/256,3/256 \
        --policy runs/gen/policy --parallel "${LAG_PARALLEL:-2}" ${LAG_OVERRIDES:-}
      (cd runs/lag && tar czf "$OUT/lag_runs.tgz" --exclude-from="$EXCLUDES" .) ;;
    host-reach)  # can device code read the exec worker's host memory (HMM)? The facts that decide it and a
      # trusted kernel on a heap, executable and fixed address, then the hostile corpus case that submits
      # the fixed-address read through the pool (docs/THREAT_MODEL.md, "Not guaranteed")
      stage host-reach 200 bash -c 'python3 scripts/host_memory_probe.py; python3 -m pytest -q -rfE -m gpu \
        --timeout=150 -p no:cacheprovider tests/kernels_env/test_host_isolation.py \
        tests/kernels_env/test_hostile_corpus.py -k "reads_host_memory or host_read"' ;;
    validate)  # every kernels_env GPU test (three groups in parallel: no timing asserted), then the timed
      # suite, the env benchmark against .bench_before (`git archive c7dc096 kernels_env | tar -x -C
      # .bench_before`, carried) and the step-time arms, each alone on the GPU
      (stage gpu-env 240 python3 -m pytest -q -rfE -m gpu --timeout=150 -p no:cacheprovider \
         tests/kernels_env/test_expected_cache.py tests/kernels_env/test_broken_corpus.py tests/kernels_env/test_cupy_backend.py \
         tests/kernels_env/test_pool.py tests/kernels_env/test_pool_spares.py tests/kernels_env/test_pipeline.py \
         tests/kernels_env/test_timing_cheats.py tests/kernels_env/test_cupy_timing_loop.py) &
      (stage gpu-hostile 240 python3 -m pytest -q -rfE -m gpu --timeout=150 -p no:cacheprovider \
         tests/kernels_env/test_hostile_corpus.py tests/kernels_env/test_hostile_pool.py) &
      (stage gpu-suite 240 python3 -m pytest -q -rfE -m gpu --timeout=150 -p no:cacheprovider \
         tests/kernels_env/test_suite_solutions.py tests/kernels_env/test_kernelbench_torch.py) &
      wait
      stage hostile-table 200 python3 scripts/hostile_table.py --backend cupy --case-timeout 40
      stage suite 150 python3 -m kernels_env check-suite --backend cupy
      stage envbench ${ENVBENCH_S:-300} python3 benchmarks/env_throughput.py --before-src .bench_before --repeat 2 --arm-timeout 120
      stage step-time 240 python3 benchmarks/step_time.py --config configs/experiment/grpo.yaml --model-shape experiment \
         --steps 2 --warmup 1 --arms after --arm 'onechunk: rollout.overlap_chunks=1' --arm 'mesh1: mesh.force=true' \
         --arm 'cudnn: optimizer.attention=cudnn model.remat=false' ;;
    step-speed-mesh)  # issue 29: the grpo config on a one-device mesh (mesh.force) against the plain path,
      # 8 timed steps an arm (two steps an arm could not resolve the goal's 5%: docs/results/step-time/2026-12-07_h100_2/)
      sft_policy
      stage step-mesh ${STEP_GRPO_S:-240} python3 benchmarks/step_time.py --config configs/generated/grpo.yaml \
        --arms after --arm 'mesh1: mesh.force=true' --steps 8 --warmup 1 ;;
    step-speed|step-speed-mt|step-speed-rest|step-speed-cudec|step-speed-preempt|step-speed-compact|step-speed-grpo|step-speed-trace|draft-potential|step-speed-spec|step-speed-prefill)  # issue 29: the generated-family configs'
      # defaults against the headline's rollout and update settings, the real SFT policy (carried in artifacts/),
      # each config in its own process, alone on the GPU. The stages sum to more than one 600 s device command:
      # step-speed-mt (multiturn) and step-speed-rest (leap, grpo) split them over two. step-speed-cudec: the
      # multiturn config's decode attention (default auto = cuDNN on a GPU, reading each row's written cache
      # only and skipping stopped rows) against no skipping, einsum, and cuDNN over the whole cache
      sft_policy
      H=${STEP_H:-'headline: rollout.pipeline_turns=false sampling.kv_reuse=false sampling.speculate=0 rollout.preempt=0 rollout.overlap_chunks=2 optimizer.attention=einsum sampling.attention=einsum sampling.compact_factor=1'}
      if [ "$s" = step-speed-preempt ]; then  # preemption (0.25 by default in configs/generated since
        # 2026-12-06) against none and 0.1, the multiturn config; then LEAP's against none
        stage step-preempt-mt ${STEP_MT_S:-300} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --arm 'nopre: rollout.preempt=0' --arm 'pre10: rollout.preempt=0.1' --steps 3 --warmup 1
        stage step-preempt-leap ${STEP_LEAP_S:-160} python3 benchmarks/step_time.py --config configs/generated/leap.yaml \
          --arms after --arm 'nopre: rollout.preempt=0' --steps 3 --warmup 1
        continue
      fi
      if [ "$s" = step-speed-compact ]; then  # the decode loop continuing with its live rows alone once at most
        # 1/4 of them still generate (the default, `after`) against the full batch throughout; and 8 decode
        # steps per loop iteration (one loop test, a device->host read, per 8 tokens) instead of 4; multiturn
        stage step-compact ${STEP_MT_S:-330} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --arm 'full: sampling.compact_factor=1' --arm 'spi8: sampling.steps_per_iter=8' \
          --steps 2 --warmup 1
        continue
      fi
      if [ "$s" = step-speed-trace ]; then  # is the multiturn rollout kernel-bound (GPU busy ~ wall) or does
        # the GPU wait on the host between kernels? One more rollout traced after the timed steps (one arm:
        # each arm compiles for ~2 min; docs/results/step-time/2026-12-06_h100_2/)
        stage step-trace ${STEP_MT_S:-300} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --trace after --steps 2 --warmup 1
        continue
      fi
      if [ "$s" = step-speed-grpo ]; then  # GRPO's evaluation (0.3-0.7 s) waits for the whole batch's
        # generation: the default (preemption at 0.25: rows done when a quarter still generate are
        # evaluated next to that tail) against none and two chunks on top; and the prefills (80k prompt
        # tokens a step) through einsum instead of the fused attention (1.30 -> 1.13 s with it on an H100,
        # docs/results/step-time/2026-12-06_h100_4/). (6 exec workers per GPU: no faster on the env
        # benchmark, docs/results/step-time/2026-12-06_h100_3/)
        stage step-grpo-overlap ${STEP_GRPO_S:-240} python3 benchmarks/step_time.py --config configs/generated/grpo.yaml \
          --arms after --arm 'nopre: rollout.preempt=0' --arm 'chunks2: rollout.overlap_chunks=2' \
          --arm 'prefill-einsum: sampling.prefill_attention=einsum' --steps 3 --warmup 1
        continue
      fi
      if [ "$s" = step-speed-spec ]; then  # issue 29: the multiturn defaults (speculative decoding, k = 8, for
        # rows continuing a conversation; first turns in the plain loop with 4 steps per loop test: step
        # 1.79 -> 1.76 s on an H100, docs/results/step-time/2026-12-06_h100_4/) against no drafts and against
        # drafts in every decode call (2.39 -> 2.01 s against no drafts, docs/results/step-time/2026-12-06_h100_3/)
        stage spec-gpu-test 200 python3 -m pytest -q -rfE -m gpu --timeout=190 -p no:cacheprovider \
          tests/leap_jax/test_speculative_decode.py
        stage step-spec ${STEP_SPEC_S:-400} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --arm 'nospec: sampling.speculate=0' \
          --arm 'all: sampling.speculate_scope=all sampling.steps_per_iter=1' --steps 2 --warmup 1
        continue
      fi
      if [ "$s" = step-speed-prefill ]; then  # issue 29: the prefills' attention (whole prompts and kv_reuse's
        # deltas) through the fused cuDNN kernel (the default since 2026-12-06: multiturn step 2.24 -> 1.84 s on
        # an H100, docs/results/step-time/2026-12-06_h100_4/) against einsum's fp32 scores, traced; the GPU
        # test of the sampler's variants first
        stage prefill-gpu-test 200 python3 -m pytest -q -rfE -m gpu --timeout=190 -p no:cacheprovider \
          tests/leap_jax/test_sampler.py -k variants_agree
        stage step-prefill ${STEP_SPEC_S:-400} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --arm 'prefill-einsum: sampling.prefill_attention=einsum' --steps 2 --warmup 1 --trace after
        continue
      fi
      if [ "$s" = draft-potential ]; then  # issue 29: would prompt-lookup speculative decoding pay? Sampled
        # multiturn rollouts of the real policy (full batch) replayed with n-gram drafts; brings them back
        stage draft-potential ${DRAFT_S:-300} python3 benchmarks/draft_potential.py --config configs/generated/multiturn.yaml \
          --rollouts ${DRAFT_ROLLOUTS:-3} --dump "$OUT/rollouts_multiturn.json.gz" --ngram 4,3,2 --draft 4,8,16
        continue
      fi
      if [ "$s" = step-speed-cudec ]; then
        stage step-cudec ${STEP_MT_S:-330} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
          --arms after --arm 'noskip: sampling.skip_done_rows=false' --arm 'einsum: sampling.attention=einsum' \
          --arm 'cudec-full: sampling.attention=cudnn sampling.attention_lengths=false sampling.skip_done_rows=false' \
          --steps 2 --warmup 1
        continue
      fi
      # (lag1: rollout.update_lag=1 on top of the defaults; it reuses the after arm's compiled programs)
      [ "$s" = step-speed-rest ] || stage step-multiturn ${STEP_MT_S:-330} python3 benchmarks/step_time.py --config configs/generated/multiturn.yaml \
        --arms after,lag1 --arm "$H" --steps 2 --warmup 1
      [ "$s" = step-speed-mt ] && continue
      stage step-leap ${STEP_LEAP_S:-200} python3 benchmarks/step_time.py --config configs/generated/leap.yaml \
        --arms after,lag1 --arm "$H" --steps 2 --warmup 1
      stage step-grpo ${STEP_GRPO_S:-200} python3 benchmarks/step_time.py --config configs/generated/grpo.yaml \
        --arms after,lag1 --arm "$H" --arm 'mesh1: mesh.force=true' --steps 2 --warmup 1 ;;
    ray)  # issue 22: a local Ray cluster with one GPU host (this machine) scores the suite with the statuses
      # of process mode, then the env benchmark's ray-vs-process arm. Carry Ray as a wheel in .whl/
      # (docs/DISTRIBUTED_EVAL.md); RAY_ARGS e.g. "--level 1"
      export RAY_USAGE_STATS_ENABLED=0
      stage ray-suite ${RAY_SUITE_S:-420} python3 scripts/ray_suite_check.py --backend cupy ${RAY_ARGS:-}
      stage ray-envbench ${ENVBENCH_S:-300} python3 benchmarks/env_throughput.py --pool ray --repeat 2 ${ENVBENCH_ARGS:-} ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
