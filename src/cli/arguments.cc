#include "arguments.h"

#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>

namespace fsdpskip::cli {
namespace {

std::string joined(const std::vector<std::string>& words, const char* separator) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : separator) + word;
  return text;
}

std::string name_of(const Subcommand& row) { return "fsdpskip " + joined(row.words, " "); }

int usage_error(const std::string& who, const std::string& what, const std::string& help_for) {
  fprintf(stderr, "%s: %s (%s --help)\n", who.c_str(), what.c_str(), help_for.c_str());
  return 2;
}

void print_help(const Subcommand& row) {
  std::string name = name_of(row);
  printf("%s: %s\n\nUsage: %s [OPTIONS]%s%s\n\nOptions:\n", name.c_str(), row.summary.c_str(), name.c_str(),
         row.command_follows ? " [--] " : row.operands.empty() ? "" : " ", row.operands.c_str());
  std::vector<std::pair<std::string, std::string>> lines = {{"-h, --help", "print this help"}};
  for (const Option& option : row.options) {
    std::string left = (option.short_name.empty() ? "" : option.short_name + ", ") + option.name +
                       (option.value.empty() ? "" : " " + option.value);
    std::string right = option.help;
    if (!option.choices.empty()) right += " (" + joined(option.choices, ", ") + ")";
    lines.emplace_back(left, right);
  }
  size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [left, right] : lines) printf("  %-*s  %s\n", static_cast<int>(width), left.c_str(), right.c_str());
  if (!row.footer.empty()) printf("\n%s", row.footer.c_str());
}

// The program's help, or a group's ("fsdpskip plugin --help") when `group` is given.
void print_program_help(const std::string& about, const std::vector<Subcommand>& table, const std::string& group = "") {
  printf("%s\n\nUsage: fsdpskip %sSUBCOMMAND [OPTIONS] ...\n%s\nSubcommands:\n", about.c_str(),
         group.empty() ? "" : (group + " ").c_str(), group.empty() ? "       fsdpskip --version\n" : "");
  size_t width = 0;
  for (const Subcommand& row : table) width = std::max(width, joined(row.words, " ").size());
  for (const Subcommand& row : table)
    if (group.empty() || row.words[0] == group)
      printf("  %-*s  %s\n", static_cast<int>(width), joined(row.words, " ").c_str(), row.summary.c_str());
  printf("\nfsdpskip SUBCOMMAND --help for each.\n");
}

// The first words of the table's rows, once each, in order: "run, doctor, …".
std::string first_words(const std::vector<Subcommand>& table, const std::string& group = "") {
  std::vector<std::string> words;
  for (const Subcommand& row : table) {
    if (!group.empty() && (row.words.size() < 2 || row.words[0] != group)) continue;
    const std::string& word = group.empty() ? row.words[0] : row.words[1];
    if (std::find(words.begin(), words.end(), word) == words.end()) words.push_back(word);
  }
  return joined(words, ", ");
}

bool positive_integer(const std::string& text, int* value) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *value = std::stoi(text);
  return *value > 0;
}

// Parses the words after the subcommand's own into its destinations; 0 or 2.
int parse(const Subcommand& row, const std::vector<std::string>& args, bool* help) {
  std::string name = name_of(row);
  std::vector<const Option*> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (row.operands.empty()) return usage_error(name, "unexpected '--'", name);
      row.rest->insert(row.rest->end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") return *help = true, 0;
    if (arg.size() < 2 || arg[0] != '-') {  // an operand
      if (row.operands.empty()) return usage_error(name, "unexpected argument '" + arg + "'", name);
      if (row.command_follows) {
        row.rest->insert(row.rest->end(), args.begin() + i, args.end());
        break;
      }
      row.rest->push_back(arg);
      continue;
    }
    // --name, --name=value, -x, -xVALUE, -x VALUE
    bool is_long = arg.compare(0, 2, "--") == 0;
    size_t equals = is_long ? arg.find('=') : std::string::npos;
    std::string key = is_long ? arg.substr(0, equals) : arg.substr(0, 2);
    auto found = std::find_if(row.options.begin(), row.options.end(), [&](const Option& option) {
      return option.name == key || (!option.short_name.empty() && option.short_name == key);
    });
    if (found == row.options.end()) return usage_error(name, "unknown option '" + key + "'", name);
    const Option& option = *found;
    given.push_back(&option);
    std::optional<std::string> value;
    if (equals != std::string::npos) value = arg.substr(equals + 1);
    else if (!is_long && arg.size() > 2) value = arg.substr(2);
    if (option.value.empty()) {
      if (value) return usage_error(name, option.name + " takes no value", name);
      *option.flag = true;
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) return usage_error(name, option.name + " needs a value (" + option.value + ")", name);
      value = args[++i];
    }
    if (!option.choices.empty() && std::find(option.choices.begin(), option.choices.end(), *value) == option.choices.end())
      return usage_error(name, option.name + ": " + *value + " not in {" + joined(option.choices, ",") + "}", name);
    struct stat status;
    if (option.existing_directory && (stat(value->c_str(), &status) != 0 || !S_ISDIR(status.st_mode)))
      return usage_error(name, option.name + ": " + *value + " is not a directory", name);
    if (option.number != nullptr && !positive_integer(*value, option.number))
      return usage_error(name, option.name + ": " + *value + " is not a positive integer", name);
    if (option.text != nullptr) *option.text = *value;
  }
  for (const Option* option : given)
    if (!option->excludes.empty())
      for (const Option* other : given)
        if (other->name == option->excludes)
          return usage_error(name, option->name + " cannot be given with " + other->name, name);
  return 0;
}

}  // namespace

int dispatch(int argc, char** argv, const std::string& about, const std::string& version,
             const std::vector<Subcommand>& table) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("fsdpskip", "no subcommand given: " + first_words(table), "fsdpskip");
  if (args[0] == "--help" || args[0] == "-h") return print_program_help(about, table), 0;
  if (args[0] == "--version") return printf("%s\n", version.c_str()), 0;
  const Subcommand* match = nullptr;
  for (const Subcommand& row : table)
    if (row.words.size() <= args.size() && std::equal(row.words.begin(), row.words.end(), args.begin()) &&
        (match == nullptr || row.words.size() > match->words.size()))
      match = &row;
  if (match == nullptr) {
    std::string group = first_words(table, args[0]);
    if (!group.empty() && args.size() > 1 && (args[1] == "--help" || args[1] == "-h"))
      return print_program_help(about, table, args[0]), 0;
    if (!group.empty())
      return usage_error("fsdpskip " + args[0],
                         (args.size() > 1 ? "unknown subcommand '" + args[1] + "'" : std::string("needs a subcommand")) +
                             ": " + group,
                         "fsdpskip " + args[0] + " SUBCOMMAND");
    return usage_error("fsdpskip", "unknown subcommand '" + args[0] + "' (" + first_words(table) + ")", "fsdpskip");
  }
  bool help = false;
  int status = parse(*match, std::vector<std::string>(args.begin() + match->words.size(), args.end()), &help);
  if (help) return print_help(*match), 0;
  return status != 0 ? status : match->action();
}

}  // namespace fsdpskip::cli
