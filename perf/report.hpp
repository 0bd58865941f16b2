// fabrix-perf's output: a perftest-like table on stdout, streamed one row per
// size, and the same numbers as JSON (schema in perf/README.md).
#pragma once

#include "options.hpp"
#include "stats.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace fabrix::perf {

// What the header says about the run.
struct run_info {
  std::string provider;
  std::string choice;         // "asked" (--provider NAME) or "auto"
  std::string choice_reason;  // "asked: --provider ucx", "auto-picked: the first of ... that opens here"
  std::string passed_over;    // auto: the better providers that did not open here, with why; or empty
  std::string transport;
  std::string device;
  std::string describe;      // the domain's own one-line description
  std::string memory;        // "host, allocated and registered by the provider", ...
  std::string allocated_by;  // who allocated the data region: "provider" or "fabrix-perf"
  std::string gpu_path;      // caps().gpu: none / staged / direct
  std::string dispatch;      // static provider type or any_provider
  std::string clock;         // "TSC" or "steady_clock"
  std::string role;          // "client", "loopback" or "client (launched)"
  std::string bootstrap;     // the bootstrap's describe(): which engine, where
};

class report {
 public:
  report(const options& o, run_info info);

  void header() const;
  void bw_row(test_kind t, const bw_result& r);
  void lat_row(test_kind t, const lat_result& r);
  // Writes the JSON file named by --out_json (if any); false with a message on error.
  bool write_json(std::string& error) const;

 private:
  void section(test_kind t, mode_kind m);

  struct row {
    test_kind test;
    mode_kind mode;
    bw_result bw;
    lat_result lat;
  };
  const options& opts_;
  run_info info_;
  std::vector<row> rows_;
  bool have_section_ = false;
  test_kind cur_test_ = test_kind::write;
  mode_kind cur_mode_ = mode_kind::bw;
};

}  // namespace fabrix::perf
