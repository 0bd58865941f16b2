#!/usr/bin/env bash
# Runs the verbs conformance binary twice in one VM boot (a boot costs CI
# 1-2 min): once connecting through the bootstrap (UD hellos), once through
# rdma_cm (FABRIX_VERBS_CONNECT=rdma_cm). Every case runs in both; the
# verbs-only rdma_cm cases run in both too (they ask for rdma_cm
# themselves). The second pass runs the static provider only: how queue
# pairs connect does not change what fabrix::any_provider forwards, which
# the first pass checks; it also posts with ibv_post_send
# (FABRIX_VERBS_WR_API=0) where the first pass uses rxe's ibv_wr_* API, so
# both ways of posting run every case; its transfers stop at 4 MiB + 3 (the
# first pass moves 64 MiB). Then, when FABRIX_VM_ALSO names more test binaries (space-
# separated; meson sets it to tests/vm/vm_verbs_liveness and, in CUDA
# builds, tests/gpu/gpu_verbs), each of them with --no-colors; a skip (77)
# there counts as a failure, since rxe0 exists. Exits with the first
# failure's status, after everything ran.
#   conformance-verbs.sh BINARY [doctest args...]
set -u
bin=$1
shift
status=0
for method in bootstrap rdma_cm; do
  only_static=()
  wr_api=1
  max_transfer=
  [ "$method" = bootstrap ] || { only_static=(--test-case-exclude='*any_provider*'); wr_api=0; max_transfer=4194307; }
  echo "=== verbs conformance, FABRIX_VERBS_CONNECT=$method FABRIX_VERBS_WR_API=$wr_api FABRIX_TEST_MAX_TRANSFER=$max_transfer"
  start=$SECONDS
  FABRIX_VERBS_CONNECT=$method FABRIX_VERBS_WR_API=$wr_api FABRIX_TEST_MAX_TRANSFER=$max_transfer "$bin" "$@" "${only_static[@]}"
  rc=$?
  echo "=== FABRIX_VERBS_CONNECT=$method: exit $rc after $((SECONDS - start)) s"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
for extra in ${FABRIX_VM_ALSO:-}; do
  echo "=== $extra"
  start=$SECONDS
  "$extra" --no-colors
  rc=$?
  echo "=== $extra: exit $rc after $((SECONDS - start)) s"
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
