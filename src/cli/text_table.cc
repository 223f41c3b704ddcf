#include "text_table.h"

#include <algorithm>

namespace fsdpskip::cli {

std::string TextTable::render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_)
    for (size_t column = 0; column < row.size(); ++column) {
      if (widths.size() <= column) widths.push_back(0);
      widths[column] = std::max(widths[column], row[column].size());
    }
  std::string text;
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t column = 0; column < row.size(); ++column) {
      out += row[column];
      if (column + 1 < row.size()) out += std::string(widths[column] - row[column].size() + 2, ' ');
    }
    text += out + "\n";
  };
  for (size_t i = 0; i < rows_.size(); ++i) {
    line(rows_[i]);
    if (i == 0) {
      std::vector<std::string> rule;
      for (size_t width : widths) rule.push_back(std::string(width, '-'));
      line(rule);
    }
  }
  return text;
}

}  // namespace fsdpskip::cli
