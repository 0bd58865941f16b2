# shellcheck shell=bash
# Sourced by installed.sh and subproject.sh: the consumer program of each
# component, the one table every way of consuming (pkg-config, CMake, Meson)
# builds from. Per component: its source in tests/consume, the macro that
# picks the provider in provider_loopback.cpp (none: UCX), whether it runs
# on a machine without an RDMA device (verbs only links there), and the
# other components its consumer uses too (coll: the collectives need a
# provider to run on, UCX over tcp; it is consumed with fabrix-ucx).
consumer_src() {
  case $1 in
    ucx | ofi | verbs) echo provider_loopback.cpp ;;
    coll) echo coll_allreduce.cpp ;;
    mpi) echo mpi_uninitialized.cpp ;;
    cuda) echo cuda_probe.cpp ;;
  esac
}
consumer_define() {
  case $1 in
    ofi) echo FABRIX_CONSUME_OFI ;;
    verbs) echo FABRIX_CONSUME_VERBS ;;
  esac
}
runs_here() { [[ $1 != verbs ]]; }
consumer_needs() {
  case $1 in
    coll) echo ucx ;;
  esac
}
