#!/usr/bin/env bash
# Ray for a GPU machine that reaches no package index, in two carries (a device command takes at most
# 64 MiB along; Ray's wheel alone is ~76 MiB):
#   bash scripts/ray_carry.sh pack        here: download Ray and its requirements as wheels for the GPU
#                                         machine's Python, tar them and split the tar in two halves,
#                                         .whl/ray-1/ and .whl/ray-2/ (ignored by git)
#   bash scripts/ray_carry.sh install     there: join the halves into .whl/*.whl, which
#                                         `scripts/gpu_session.sh` installs offline (then its `ray` stage)
# Two device commands back to back (the machine keeps what the first left while it is held): the
# first carries .whl/ray-1 and does nothing else (e.g. `true`), the second carries .whl/ray-2 and runs
# `bash scripts/ray_carry.sh install && bash scripts/gpu_session.sh ray`.
# RAY_VERSION (default: the newest) and PY_VERSION (default 3.12, the GPU machine's) choose the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  pack)
    rm -rf .whl/ray .whl/ray-1 .whl/ray-2 && mkdir -p .whl/ray .whl/ray-1 .whl/ray-2
    python3 -m pip download "ray${RAY_VERSION:+==$RAY_VERSION}" --only-binary=:all: -d .whl/ray \
      --python-version "${PY_VERSION:-3.12}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --platform any
    tar cf .whl/ray.tar -C .whl/ray .
    half=$(( ($(stat -c %s .whl/ray.tar) + 1) / 2 ))
    split -b "$half" -d .whl/ray.tar .whl/ray.tar.part-
    mv .whl/ray.tar.part-00 .whl/ray-1/ && mv .whl/ray.tar.part-01 .whl/ray-2/
    rm -f .whl/ray.tar
    du -sh .whl/ray-1 .whl/ray-2 ;;
  install)
    for part in .whl/ray-1/ray.tar.part-00 .whl/ray-2/ray.tar.part-01; do
      [ -f "$part" ] || { echo "ray_carry: $part is missing: carry .whl/ray-1 and .whl/ray-2 in two commands"; exit 2; }
    done
    cat .whl/ray-1/ray.tar.part-00 .whl/ray-2/ray.tar.part-01 | tar xf - -C .whl
    ls .whl/*.whl ;;
  *) echo "usage: bash scripts/ray_carry.sh pack | install"; exit 2 ;;
esac
