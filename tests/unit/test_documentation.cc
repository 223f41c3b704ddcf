// The documentation's tables of shared facts are the tables themselves,
// rendered: options.def as "Environment" in docs/configuration.md, report.def
// as the report's schema in docs/report.md. A failure prints the table to
// paste.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "../../src/common/options_table.h"
#include "../../src/common/report_table.h"

namespace fsdpskip {
namespace {

// A file of the source tree, by its path from the top ("docs/report.md").
std::string source_file(const std::string& path) {
  std::ifstream in(std::string(FSDPSKIP_SOURCE_DIR "/") + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table that follows `heading` in `text` (its lines starting with '|').
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

const char kConfiguration[] = "docs/configuration.md";
const char kReport[] = "docs/report.md";

TEST(Documentation, EnvironmentTableIsOptionsDef) {
  EXPECT_EQ(table_after(source_file(kConfiguration), "## Environment"), environment_table())
      << "paste into " << kConfiguration << " under \"## Environment\":\n"
      << environment_table();
}

std::string report_table() {
  std::string table = "| key | meaning |\n|---|---|\n";
  for (const ReportKey& row : kReportKeys) table += std::string("| `") + row.key + "` | " + row.meaning + " |\n";
  return table;
}

const std::string kReportHeading =
    "## The report (`FSDPSKIP_REPORT`), schema version " + std::to_string(kReportSchemaVersion);

TEST(Documentation, ReportTableIsReportDef) {
  EXPECT_EQ(table_after(source_file(kReport), kReportHeading), report_table())
      << "paste into " << kReport << " under \"" << kReportHeading << "\":\n"
      << report_table();
}

}  // namespace
}  // namespace fsdpskip
