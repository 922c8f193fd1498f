# Sourced by every GPU recipe in this folder: the repository root as working directory, logs in
# ${OUT:-./gpu_out}, JAX leaving GPU memory to the CuPy evaluation workers, and `run_logged`.
#   run_logged NAME LIMIT_S CMD...   runs CMD under `timeout`, its output in $OUT/NAME.log; prints the
#                                    exit code, the seconds and the log's last ${TAIL:-25} lines
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-gpu_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
# wheels placed in .whl/ (a machine without a package index, e.g. Ray: scripts/ray_carry.sh) install offline
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

run_logged() {
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - t0 ))s (log: $OUT/$name.log)"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
  return $rc
}
