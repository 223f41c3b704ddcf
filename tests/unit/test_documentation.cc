// The documentation's tables of shared facts are the tables themselves,
// rendered: options.def as "Environment" in docs/configuration.md, report.def
// as the report's schema in docs/report.md, hooks.def as the symbol table in
// docs/torch-symbols.md. A failure prints the table to paste.
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "../../src/common/libraries.h"
#include "../../src/common/options_table.h"
#include "../../src/common/report_table.h"
#include "hooks.h"

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

// A row's function as c++filt shows it; NCCL's C functions by their name.
std::string function_of(const HookRow& row) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(row.mangled, nullptr, nullptr, &status), free);
  if (status == 0 && name) return name.get();
  return std::string(row.mangled) + " (NCCL's C API)";
}

std::string hook_table() {
  std::string table = "| row | function | mangled name | library |\n|---|---|---|---|\n";
  for (const HookRow& row : kHookRows) {
    std::string library = library_prefix(row.library);
    table += std::string("| `") + row.id + "` | " + function_of(row) + " | `" + row.mangled + "` | " +
             library.substr(0, library.find(".so")) + " |\n";
  }
  return table;
}

const char kTorchSymbols[] = "docs/torch-symbols.md";

TEST(Documentation, SymbolTableIsHooksDef) {
  EXPECT_EQ(table_after(source_file(kTorchSymbols), "## Every row of `hooks.def`"), hook_table())
      << "paste into " << kTorchSymbols << " under \"## Every row of `hooks.def`\":\n"
      << hook_table();
}

// The report's `calls` field names every kernel of kernels.def that can be
// skipped (role INIT or STEP), in order.
TEST(Documentation, ReportCallsNameEveryKernel) {
  std::vector<const char*> kernels;
#define KERNEL(id, name, role) \
  if (FSDPSKIP_ROLE_##role != FSDPSKIP_ROLE_READ) kernels.push_back(name);
#include "../../src/common/kernels.def"
#undef KERNEL
  std::string meaning, named, expected;
  for (const ReportKey& row : kReportKeys)
    if (std::string(row.key) == "calls") meaning = row.meaning;
  meaning = meaning.substr(0, meaning.find("; "));
  for (size_t at = meaning.find('`'); at != std::string::npos; at = meaning.find('`', meaning.find('`', at + 1) + 1))
    named += meaning.substr(at + 1, meaning.find('`', at + 1) - at - 1) + " ";
  for (const char* kernel : kernels) expected += std::string(kernel) + " ";
  EXPECT_EQ(named, expected) << "report.def's calls: " << meaning;
}

}  // namespace
}  // namespace fsdpskip
