// The README's tables of shared facts are the tables themselves, rendered:
// options.def as "Environment", report.def as the report's schema. A
// failure prints the table to paste.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "../../src/common/options_table.h"
#include "../../src/common/report_table.h"

namespace fsdpskip {
namespace {

std::string readme() {
  std::ifstream in(FSDPSKIP_SOURCE_DIR "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table that follows `heading` in the README (its lines starting with '|').
std::string table_after(const std::string& text, const std::string& heading) {
  size_t at = text.find("\n" + heading + "\n");
  if (at == std::string::npos) return "(no heading " + heading + ")";
  at = text.find("\n|", at);
  std::string table;
  while (at != std::string::npos && text.compare(at, 2, "\n|") == 0) {
    size_t end = text.find('\n', at + 1);
    table += text.substr(at + 1, end - at);
    at = end;
  }
  return table;
}

// "auto, on" as "`auto`, `on`": the words of a word-valued variable.
std::string as_code_words(const std::string& accepted) {
  std::string out, word;
  for (size_t i = 0; i <= accepted.size(); ++i) {
    char c = i < accepted.size() ? accepted[i] : ',';
    if (c == ',' || c == ' ' || c == '/') {
      if (!word.empty()) out += "`" + word + "`";
      word.clear();
      if (i < accepted.size()) out += c;
    } else {
      word += c;
    }
  }
  return out;
}

std::string environment_table() {
  std::string table = "| variable | accepted | default | meaning |\n|---|---|---|---|\n";
  for (const Option& option : kOptions) {
    bool words = option.role == OptionRole::kMode || option.role == OptionRole::kLogLevel ||
                 option.role == OptionRole::kStacks || option.role == OptionRole::kOnPending ||
                 option.role == OptionRole::kAutoRequires;
    std::string default_value = option.default_value;
    if (words && !default_value.empty()) default_value = "`" + default_value + "`";
    table += std::string("| `") + option.name + "` | " + (words ? as_code_words(option.accepted) : option.accepted) +
             " | " + default_value + " | " + option.meaning + " |\n";
  }
  return table;
}

TEST(Documentation, ReadmeEnvironmentTableIsOptionsDef) {
  EXPECT_EQ(table_after(readme(), "## Environment"), environment_table()) << "paste into README.md:\n"
                                                                          << environment_table();
}

std::string report_table() {
  std::string table = "| key | meaning |\n|---|---|\n";
  for (const ReportKey& row : kReportKeys) table += std::string("| `") + row.key + "` | " + row.meaning + " |\n";
  return table;
}

const std::string kReportHeading =
    "## The report (`FSDPSKIP_REPORT`), schema version " + std::to_string(kReportSchemaVersion);

TEST(Documentation, ReadmeReportTableIsReportDef) {
  EXPECT_EQ(table_after(readme(), kReportHeading), report_table()) << "paste into README.md under \""
                                                                   << kReportHeading << "\":\n"
                                                                   << report_table();
}

}  // namespace
}  // namespace fsdpskip
