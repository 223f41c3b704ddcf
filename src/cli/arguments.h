// The command line as data: each subcommand is a row (its words, options,
// operands, help and action) of the table in main.cc, parsed here. No
// library: the command builds with a C++ compiler alone.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fsdpskip::cli {

struct Option {
  std::string name;                  // "--mode"
  std::string short_name;            // "-j", or ""
  std::string value;                 // what it takes ("MODE"); "" for a flag
  std::string help;
  std::vector<std::string> choices;  // the accepted values; empty: any
  std::string* text = nullptr;       // where a value goes
  bool* flag = nullptr;              // where a flag goes
  int* number = nullptr;             // where a number goes (a positive integer)
  bool existing_directory = false;   // the value must name a directory
  std::string excludes;              // another option of the row it cannot be given with
};

struct Subcommand {
  std::vector<std::string> words;  // {"plugin", "build"}
  std::string summary;
  std::vector<Option> options;
  std::string operands;                       // "REPORTS..." or "COMMAND [ARGS...]"; "" for none
  std::vector<std::string>* rest = nullptr;   // where the operands go
  bool command_follows = false;  // from the first operand (or "--") on, every word is the command's
  std::string footer;
  std::function<int()> action;
};

// Parses argv against `table`, then runs the matching subcommand's action and
// returns its status. --help (for the program or any subcommand) prints the
// help on stdout and returns 0; --version prints `version`; a usage error
// prints one line on stderr, "fsdpskip SUBCOMMAND: what is wrong (fsdpskip
// SUBCOMMAND --help)", and returns 2.
int dispatch(int argc, char** argv, const std::string& about, const std::string& version,
             const std::vector<Subcommand>& table);

}  // namespace fsdpskip::cli
