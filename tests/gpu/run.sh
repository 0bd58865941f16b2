#!/usr/bin/env bash
# The GPU checks from a checkout: packs the bundle (tests/gpu/bundle.sh,
# which needs meson and nvcc, no GPU) and runs its runner, which writes
# under $OUT. On the GPU machine itself run the prebuilt bundle directly:
#   OUT=/some/dir bash build-gpu-bundle/run.sh
# (this script, given a bundle and no meson/nvcc, runs that bundle too).
# Arguments go to bundle.sh: [--no-build] [BUILD_DIR [OUT_DIR]].
set -euo pipefail
cd "$(dirname "$0")/../.."
args=("$@")
[ "${args[0]:-}" = --no-build ] && args=("${args[@]:1}")
bundle=${args[1]:-build-gpu-bundle}
if command -v meson >/dev/null && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  bash tests/gpu/bundle.sh "$@"
elif [ -f "$bundle/run.sh" ]; then
  echo "run.sh: no meson or nvcc here: running the bundle as it is ($bundle)"
else
  echo "run.sh: no bundle and no meson/nvcc to make one: run 'bash tests/gpu/bundle.sh' on a build machine" >&2
  exit 1
fi
exec bash "$bundle/run.sh"
