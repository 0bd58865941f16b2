#!/usr/bin/env bash
# fabrix-perf started by OpenMPI's mpirun with no FABRIX_* variable: 4 ranks
# run as 2 pairs on the job's bootstrap, which must be $2 ("PMIx" when fabrix
# has it, else "tcp store"); rank 1 reports, and every byte is checked (the
# exit status). Skipped (77) only when mpirun is absent.
set -euo pipefail
exe=$1
engine=$2
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN FABRIX_BOOTSTRAP_ENGINE
export OMPI_MCA_rmaps_base_oversubscribe=true  # fewer than 4 cores
out=$(timeout 120 mpirun --allow-run-as-root -np 4 -x UCX_WARN_UNUSED_ENV_VARS=n "$exe" write bw -s 4096 -n 500 2>&1)
echo "$out"
grep -q "bootstrap    : pair 0 of 2 (ranks 0-1) of $engine" <<<"$out"
grep -q "fabrix-perf (client (launched))" <<<"$out"
