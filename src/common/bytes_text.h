// How fsdpskip writes a byte count ("512 B", "1.84 GiB"): the plugin's
// summary line and the command's tables say it the same way.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fsdpskip {

inline std::string bytes_text(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) value /= 1024, ++unit;
  char text[32];
  if (unit)
    snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  else
    snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  return text;
}

}  // namespace fsdpskip
