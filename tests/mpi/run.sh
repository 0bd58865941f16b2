#!/usr/bin/env bash
# Runs tests/mpi/test_mpi_bootstrap as a 4-rank job under mpirun. Skipped
# (77) only when mpirun is absent.
set -euo pipefail
exe=$1
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN
export OMPI_MCA_rmaps_base_oversubscribe=true  # 4 ranks on 2 cores
out=$(timeout 150 mpirun --allow-run-as-root -np 4 -x UCX_WARN_UNUSED_ENV_VARS=n "$exe" 2>&1) || {
  echo "$out"
  exit 1
}
echo "$out"
grep -q "every check passed on 4 ranks" <<<"$out"
