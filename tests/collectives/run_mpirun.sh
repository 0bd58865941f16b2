#!/usr/bin/env bash
# Runs examples/allreduce as a 4-rank job under OpenMPI's mpirun with no
# FABRIX_* variables: the bootstrap must find its ranks and rank 0 from
# mpirun's own environment. Skipped (77) only when mpirun is absent.
set -euo pipefail
exe=$1
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN
# The README's command; on fewer than 4 cores OpenMPI needs the README's
# oversubscribe setting.
export OMPI_MCA_rmaps_base_oversubscribe=true
out=$(timeout 120 mpirun --allow-run-as-root -np 4 -x UCX_WARN_UNUSED_ENV_VARS=n "$exe" 200003 2>&1)
echo "$out"
grep -q "over 4 ranks .*every element correct" <<<"$out"
