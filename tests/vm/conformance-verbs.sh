#!/usr/bin/env bash
# Runs the verbs conformance binary twice in one VM boot (a boot costs CI
# 1-2 min): once connecting through the bootstrap (UD hellos), once through
# rdma_cm (FABRIX_VERBS_CONNECT=rdma_cm). Every case runs in both; the
# verbs-only rdma_cm cases run in both too (they ask for rdma_cm
# themselves). Exits with the first failing run's status, after both ran.
#   conformance-verbs.sh BINARY [doctest args...]
set -u
bin=$1
shift
status=0
for method in bootstrap rdma_cm; do
  echo "=== verbs conformance, FABRIX_VERBS_CONNECT=$method"
  start=$SECONDS
  FABRIX_VERBS_CONNECT=$method "$bin" "$@"
  rc=$?
  echo "=== FABRIX_VERBS_CONNECT=$method: exit $rc after $((SECONDS - start)) s"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
