#!/usr/bin/env bash
# Runs a conformance or collectives executable as a 4-rank job under
# OpenMPI's mpirun with FABRIX_TEST_BOOTSTRAP=launcher (rank_bootstrap.hpp):
# every case's ranks bootstrap on the launcher's engine, which must be the
# one named by $2 ("PMIx", "MPI communicator", ...: checked in the line each
# rank prints). $3 is a doctest --test-case-exclude filter (the cases that
# kill a rank need forked ranks); the rest are environment settings passed
# on to the ranks (NAME=VALUE). Skipped (77) when mpirun is absent, or when
# $2 is "PMIx" and this build has no PMIx (pass "none" as $2 then).
set -euo pipefail
exe=$1
engine=$2
exclude=$3
shift 3
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
[ "$engine" = none ] && { echo "this build has no PMIx: skipped"; exit 77; }
unset FABRIX_RANK FABRIX_SIZE FABRIX_BOOTSTRAP FABRIX_JOB_TOKEN FABRIX_BOOTSTRAP_ENGINE
export OMPI_MCA_rmaps_base_oversubscribe=true # 4 ranks on 2 cores
pass_on=(-x FABRIX_TEST_BOOTSTRAP=launcher)
for kv in "$@"; do pass_on+=(-x "$kv"); done
status=0
out=$(timeout 600 mpirun --allow-run-as-root -np 4 "${pass_on[@]}" "$exe" --no-colors \
  ${exclude:+"--test-case-exclude=$exclude"} 2>&1) || status=$?
echo "$out"
[ "$status" -eq 0 ] || { echo "mpirun exited with $status"; exit 1; }
ranks=$(grep -c "^launcher bootstrap: rank [0-3] of 4: .*$engine" <<<"$out" || true)
[ "$ranks" -eq 4 ] || { echo "expected 4 ranks on the $engine engine, saw $ranks"; exit 1; }
