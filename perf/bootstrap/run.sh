#!/usr/bin/env bash
# The bootstrap scaling benchmark (issue 18): a job's startup (bootstrap,
# connect_all, one exchange; bootstrap_scale.cpp) under OpenMPI's mpirun for
# 2 to 256 ranks on this machine, on three engines:
#   pmix         PMIx_Put/Commit/Fence/Get through mpirun's PMIx server
#   tcp          the built-in TCP store, its default exchange (star up to 8
#                ranks, peer-to-peer above)
#   tcp-star     the built-in store forced to the star (every blob through
#                rank 0), for contrast
# UCX runs over shared memory (UCX_TLS=sm,self), so the bytes counted are
# the bootstrap's. Each point runs REPS times (default 3); the median of the
# slowest rank's total time and the busiest rank's bytes are kept.
#
# usage: perf/bootstrap/run.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, perf/results/<today>)
# Writes OUT_DIR/bootstrap_scale.jsonl (every run), bootstrap_scale.md (the
# table) and bootstrap_scale.png (time and bytes against ranks).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-perf/results/$(date +%F)}
reps=${REPS:-3}
sizes=${SIZES:-"2 8 32 128 256"}
exe=$build/perf/bootstrap/bootstrap-scale
[ -x "$exe" ] || { echo "$exe not built (needs UCX; ninja -C $build perf/bootstrap/bootstrap-scale)"; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found (apt-get install openmpi-bin)"; exit 1; }
mkdir -p "$out"
jsonl=$out/bootstrap_scale.jsonl
: >"$jsonl"
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN FABRIX_BOOTSTRAP_EXCHANGE
export OMPI_MCA_rmaps_base_oversubscribe=true
for n in $sizes; do
  for engine in pmix tcp tcp-star; do
    for rep in $(seq "$reps"); do
      case $engine in
        pmix) vars=(-x FABRIX_BOOTSTRAP_ENGINE=pmix) ;;
        tcp) vars=(-x FABRIX_BOOTSTRAP_ENGINE=tcp) ;;
        tcp-star) vars=(-x FABRIX_BOOTSTRAP_ENGINE=tcp -x FABRIX_BOOTSTRAP_EXCHANGE=star) ;;
      esac
      t0=$(date +%s.%N)
      line=$(timeout 600 mpirun --allow-run-as-root -np "$n" -x UCX_TLS=sm,self -x UCX_WARN_UNUSED_ENV_VARS=n \
        "${vars[@]}" "$exe" 2>/tmp/bootstrap_scale.err | grep '^{' || true)
      t1=$(date +%s.%N)
      if [ -z "$line" ]; then
        echo "FAILED: $engine $n ranks (rep $rep):"; tail -5 /tmp/bootstrap_scale.err; exit 1
      fi
      echo "{\"engine\": \"$engine\", \"rep\": $rep, \"mpirun_s\": $(python3 -c "print(round($t1 - $t0, 3))"), \"run\": $line}" | tee -a "$jsonl"
    done
  done
done
# Debian's python3-matplotlib lives with /usr/bin/python3 (another python3
# may come first on PATH).
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
"$py" perf/bootstrap/report.py "$jsonl" "$out"
