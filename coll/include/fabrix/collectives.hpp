// fabrix collectives — allreduce, reduce_scatter, allgather, alltoall(v) and
// barrier over any provider with write_with_imm. Header-only; see
// collectives/communicator.hpp for the model and its guarantees.
#pragma once

#include <fabrix/collectives/allgather.hpp>
#include <fabrix/collectives/allreduce.hpp>
#include <fabrix/collectives/alltoall.hpp>
#include <fabrix/collectives/communicator.hpp>
#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/collectives/options.hpp>
#include <fabrix/collectives/reduce.hpp>
#include <fabrix/collectives/reduce_scatter.hpp>
