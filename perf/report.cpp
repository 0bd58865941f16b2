#include "report.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

namespace fabrix::perf {

namespace {

constexpr double mebibyte = 1024.0 * 1024.0;

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

constexpr const char* rule = "---------------------------------------------------------------------------------------";

}  // namespace

report::report(const options& o, run_info info) : opts_(o), info_(std::move(info)) {}

void report::header() const {
  std::printf("%s\n", rule);
  std::printf(" fabrix-perf (%s)\n", info_.role.c_str());
  std::printf(" provider     : %s (%s)\n", info_.provider.c_str(), info_.choice_reason.c_str());
  if (!info_.passed_over.empty()) std::printf(" passed over  : %s\n", info_.passed_over.c_str());
  std::printf(" transport    : %s\n", info_.transport.empty() ? "(provider default)" : info_.transport.c_str());
  std::printf(" device       : %s\n", info_.device.empty() ? "(provider choice)" : info_.device.c_str());
  std::printf(" domain       : %s\n", info_.describe.c_str());
  std::printf(" memory       : %s\n", info_.memory.c_str());
  std::printf(" GPU memory   : %s\n", info_.gpu_path.c_str());
  std::printf(" dispatch     : %s\n", info_.dispatch.c_str());
  std::printf(" remote keys  : %s\n", opts_.remote_keys == "import"
                                          ? "imported once per queue pair (queue_pair::import)"
                                          : "remote_buffer per operation (--remote-keys buffer)");
  std::printf(" bootstrap    : %s\n", info_.bootstrap.c_str());
  std::printf(" clock        : %s\n", info_.clock.c_str());
  const std::string moderation =
      opts_.unsignaled   ? "   bw: one completion per post list (--unsignaled)"
      : opts_.cq_mod > 1 ? "   bw: one completion per " + std::to_string(opts_.cq_mod) + " operations (--cq-mod)"
                         : "   bw: one completion per operation (--cq-mod 1)";
  std::printf(" queue pairs  : %d   tx depth: %d   post list: %d   %s%s\n", opts_.qps, opts_.tx_depth, opts_.post_list,
              opts_.bidirectional ? "bidirectional" : "unidirectional", moderation.c_str());
  std::printf(" data checks  : every size (pattern fill + compare; atomics results checked)\n");
  std::printf("%s\n", rule);
  std::fflush(stdout);
}

void report::section(test_kind t, mode_kind m) {
  if (have_section_ && cur_test_ == t && cur_mode_ == m) return;
  have_section_ = true;
  cur_test_ = t;
  cur_mode_ = m;
  std::printf("\n %s %s%s\n", std::string(to_string(t)).c_str(), m == mode_kind::bw ? "bandwidth" : "latency",
              m == mode_kind::lat && (t == test_kind::write || t == test_kind::write_imm || t == test_kind::send)
                  ? " (ping-pong, half round trip)"
                  : "");
  if (m == mode_kind::bw) {
    const char* unit = opts_.report_gbits ? "[Gb/sec]" : "[MB/sec]";
    std::printf(" %-10s %-12s BW peak%-9s BW average%-9s MsgRate[Mpps]\n", "#bytes", "#iterations", unit, unit);
  } else {
    std::printf(" %-10s %-12s %-11s %-11s %-15s %-11s %-13s %-15s %s\n", "#bytes", "#iterations", "t_min[us]",
                "t_max[us]", "t_typical[us]", "t_avg[us]", "t_stdev[us]", "99% pct[us]", "99.9% pct[us]");
  }
}

void report::bw_row(test_kind t, const bw_result& r) {
  section(t, mode_kind::bw);
  auto unit = [&](double bytes_per_s) { return opts_.report_gbits ? bytes_per_s * 8 / 1e9 : bytes_per_s / mebibyte; };
  std::printf(" %-10llu %-12llu %-16.2f %-19.2f %.6f\n", static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.iterations), unit(r.peak_bytes_per_s), unit(r.avg_bytes_per_s),
              r.msg_rate_mpps);
  std::fflush(stdout);
  rows_.push_back({t, mode_kind::bw, r, {}});
}

void report::lat_row(test_kind t, const lat_result& r) {
  section(t, mode_kind::lat);
  std::printf(" %-10llu %-12llu %-11.3f %-11.3f %-15.3f %-11.3f %-13.3f %-15.3f %.3f\n",
              static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.iterations), r.t_min_us,
              r.t_max_us, r.t_typical_us, r.t_avg_us, r.t_stdev_us, r.t_p99_us, r.t_p999_us);
  std::fflush(stdout);
  rows_.push_back({t, mode_kind::lat, {}, r});
}

bool report::write_json(std::string& error) const {
  if (opts_.out_json.empty()) return true;
  std::ostringstream j;
  j << "{\n  \"schema\": \"fabrix-perf/1\",\n";
  j << "  \"provider\": " << json_string(info_.provider) << ",\n";
  j << "  \"provider_choice\": " << json_string(info_.choice) << ",\n";
  j << "  \"provider_reason\": " << json_string(info_.choice_reason) << ",\n";
  j << "  \"passed_over\": " << json_string(info_.passed_over) << ",\n";
  j << "  \"transport\": " << json_string(info_.transport) << ",\n";
  j << "  \"device\": " << json_string(info_.device) << ",\n";
  j << "  \"domain\": " << json_string(info_.describe) << ",\n";
  j << "  \"memory\": " << json_string(info_.memory) << ",\n";
  j << "  \"allocated_by\": " << json_string(info_.allocated_by) << ",\n";
  j << "  \"gpu_path\": " << json_string(info_.gpu_path) << ",\n";
  j << "  \"dispatch\": " << json_string(info_.dispatch) << ",\n";
  j << "  \"remote_keys\": " << json_string(opts_.remote_keys) << ",\n";
  j << "  \"clock\": " << json_string(info_.clock) << ",\n";
  j << "  \"options\": {\"qps\": " << opts_.qps << ", \"tx_depth\": " << opts_.tx_depth
    << ", \"post_list\": " << opts_.post_list << ", \"bidirectional\": " << (opts_.bidirectional ? "true" : "false")
    << ", \"unsignaled\": " << (opts_.unsignaled ? "true" : "false") << ", \"cq_mod\": " << opts_.cq_mod
    << ", \"duration_s\": " << json_number(opts_.duration_s) << "},\n";
  j << "  \"results\": [";
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const row& r = rows_[i];
    j << (i ? ",\n    " : "\n    ") << "{\"test\": " << json_string(to_string(r.test))
      << ", \"mode\": " << json_string(to_string(r.mode)) << ", ";
    if (r.mode == mode_kind::bw) {
      j << "\"bytes\": " << r.bw.bytes << ", \"iterations\": " << r.bw.iterations
        << ", \"seconds\": " << json_number(r.bw.seconds)
        << ", \"bw_peak_MBps\": " << json_number(r.bw.peak_bytes_per_s / mebibyte)
        << ", \"bw_avg_MBps\": " << json_number(r.bw.avg_bytes_per_s / mebibyte)
        << ", \"bw_avg_Gbps\": " << json_number(r.bw.avg_bytes_per_s * 8 / 1e9)
        << ", \"msg_rate_Mpps\": " << json_number(r.bw.msg_rate_mpps);
    } else {
      j << "\"bytes\": " << r.lat.bytes << ", \"iterations\": " << r.lat.iterations
        << ", \"t_min_us\": " << json_number(r.lat.t_min_us) << ", \"t_max_us\": " << json_number(r.lat.t_max_us)
        << ", \"t_typical_us\": " << json_number(r.lat.t_typical_us)
        << ", \"t_avg_us\": " << json_number(r.lat.t_avg_us) << ", \"t_stdev_us\": " << json_number(r.lat.t_stdev_us)
        << ", \"t_p99_us\": " << json_number(r.lat.t_p99_us) << ", \"t_p999_us\": " << json_number(r.lat.t_p999_us);
    }
    j << ", \"verified\": true}";
  }
  j << "\n  ]\n}\n";
  std::ofstream f(opts_.out_json, std::ios::trunc);
  if (!f) {
    error = "cannot open --out_json file '" + opts_.out_json + "'";
    return false;
  }
  f << j.str();
  f.close();
  if (!f) {
    error = "cannot write --out_json file '" + opts_.out_json + "'";
    return false;
  }
  return true;
}

}  // namespace fabrix::perf
