// Parts of the providers section (gpu_paths.cpp): how a provider moves GPU
// memory here and why, and the staged path every provider has where
// fabrix-cuda is built.
#pragma once

#include "value.hpp"

#include <fabrix/any_provider.hpp>

#include <string_view>

namespace fabrix::info {

// {path, why} for `provider` as opened here (`d`, or the error it gave).
value gpu_path_of(std::string_view provider, result<any_domain>& d);
value gpu_staged_path();

}  // namespace fabrix::info
