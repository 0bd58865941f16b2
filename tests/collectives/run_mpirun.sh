#!/usr/bin/env bash
# Runs examples/allreduce as a 4-rank job under OpenMPI's mpirun with no
# FABRIX_* variables: the bootstrap must find its ranks from mpirun's own
# environment, and says which engine it ran on: $2 (PMIx when fabrix has it;
# "tcp store" with FABRIX_BOOTSTRAP_ENGINE=tcp, passed on to the ranks).
# Skipped (77) only when mpirun is absent.
set -euo pipefail
exe=$1
engine=$2
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN
pass_on=()
[ -n "${FABRIX_BOOTSTRAP_ENGINE:-}" ] && pass_on=(-x FABRIX_BOOTSTRAP_ENGINE)
# The README's command; on fewer than 4 cores OpenMPI needs the README's
# oversubscribe setting.
export OMPI_MCA_rmaps_base_oversubscribe=true
out=$(timeout 120 mpirun --allow-run-as-root -np 4 -x UCX_WARN_UNUSED_ENV_VARS=n "${pass_on[@]}" "$exe" 200003 2>&1)
echo "$out"
grep -q "over 4 ranks .*bootstrap: $engine.*every element correct" <<<"$out"
