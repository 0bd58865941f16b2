// This process's resident memory and open descriptors, from /proc: what
// fabrix-connect-cost and tests/dynamic's churn server compare before and
// after peers come and go.
#pragma once

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace fabrix::scaling {

// VmRSS in KiB, or -1 when /proc does not say.
inline long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

// Open file descriptors, or -1 when /proc/self/fd cannot be read.
inline int open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3;  // ., .. and the directory's own descriptor
}

}  // namespace fabrix::scaling
