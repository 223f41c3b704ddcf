// Plain aligned text tables for the commands' human output.
#pragma once

#include <string>
#include <vector>

namespace fsdpskip::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell, two spaces apart, header underlined.
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fsdpskip::cli
