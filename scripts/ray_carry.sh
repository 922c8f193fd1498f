#!/usr/bin/env bash
# Ray for a GPU machine that reaches no package index, in several copies (one copy to it takes at
# most 64 MiB along, the working tree included; Ray and its requirements are ~80 MB):
#   bash scripts/ray_carry.sh pack        here: download Ray and its requirements as wheels for the GPU
#                                         machine's Python, tar them and split the tar into parts of
#                                         PART_MB (default 20) MB, .whl/ray-1/, .whl/ray-2/, ... (ignored
#                                         by git); it prints how many parts there are
#   bash scripts/ray_carry.sh install     there: join every part into .whl/*.whl, which
#                                         the GPU recipes (scripts/gpu/) install offline
# One GPU-machine command per part, back to back (the machine keeps what earlier commands left while it is
# held): each carries one .whl/ray-K and does nothing else (e.g. `true`), the last carries the last
# part and runs `bash scripts/ray_carry.sh install && bash scripts/gpu/ray_check.sh`.
# PART_MB must leave room for the working tree beside one part (64 MiB in all).
# RAY_VERSION (default: the newest) and PY_VERSION (default 3.12, the GPU machine's) choose the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  pack)
    rm -rf .whl/ray .whl/ray-[0-9]* && mkdir -p .whl/ray
    python3 -m pip download "ray${RAY_VERSION:+==$RAY_VERSION}" --only-binary=:all: -d .whl/ray \
      --python-version "${PY_VERSION:-3.12}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --platform any
    tar cf .whl/ray.tar -C .whl/ray .
    split -b "${PART_MB:-20}M" -d -a 2 .whl/ray.tar .whl/ray.tar.part-
    n=$(ls .whl/ray.tar.part-* | wc -l)
    for k in $(seq 1 "$n"); do  # part-00 -> .whl/ray-1/, part-01 -> .whl/ray-2/, ...; each knows n
      mkdir -p ".whl/ray-$k" && mv ".whl/ray.tar.part-$(printf %02d $((k - 1)))" ".whl/ray-$k/" && echo "$n" > ".whl/ray-$k/parts"
    done
    rm -f .whl/ray.tar
    du -sh .whl/ray-[0-9]*
    echo "ray_carry: $n parts; carry .whl/ray-1 .. .whl/ray-$n in $n commands" ;;
  install)
    n=""
    for f in .whl/ray-[0-9]*/parts; do [ -f "$f" ] && n=$(cat "$f") && break; done  # every part names the count
    [ -n "$n" ] || { echo "ray_carry: no .whl/ray-K/ here: carry the parts first"; exit 2; }
    parts=""
    for k in $(seq 1 "$n"); do
      part=".whl/ray-$k/ray.tar.part-$(printf %02d $((k - 1)))"
      [ -f "$part" ] || { echo "ray_carry: $part is missing: carry .whl/ray-1 .. .whl/ray-$n, one per command"; exit 2; }
      parts="$parts $part"
    done
    cat $parts | tar xf - -C .whl
    ls .whl/*.whl ;;
  *) echo "usage: bash scripts/ray_carry.sh pack | install"; exit 2 ;;
esac
