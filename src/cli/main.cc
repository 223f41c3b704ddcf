// fsdpskip: run a command under the preload, check a torch installation,
// build and list plugins for the torches on the machine, gather a job's
// reports. Every subcommand is one row of the table below; `fsdpskip
// SUBCOMMAND --help` for each.
#include <stdio.h>

#include "../common/options_table.h"
#include "../common/report_template.h"
#include "arguments.h"
#include "doctor.h"
#include "plugin.h"
#include "report.h"
#include "run.h"

using namespace fsdpskip::cli;
using fsdpskip::option_of;
using fsdpskip::OptionRole;

namespace {

// --python PY or --libtorch DIR: the torch a subcommand is about.
std::vector<Option> torch_options(const std::string& verb, std::string* python, std::string* libtorch) {
  return {{"--python", "", "PY", "a Python whose torch to " + verb + " (default: python3)", {}, python},
          {"--libtorch", "", "DIR", "a LibTorch directory to " + verb + " instead", {}, libtorch, nullptr, nullptr,
           true, "--python"}};
}

std::vector<Option> with(std::vector<Option> first, const std::vector<Option>& more) {
  first.insert(first.end(), more.begin(), more.end());
  return first;
}

// The words options.def accepts for a variable ("auto, on, off, audit").
std::vector<std::string> accepted_words(OptionRole role) {
  std::vector<std::string> words;
  std::string accepted = option_of(role).accepted;
  for (size_t start = 0, end; start <= accepted.size(); start = end + 2) {
    end = accepted.find(", ", start);
    if (end == std::string::npos) end = accepted.size();
    words.push_back(accepted.substr(start, end - start));
  }
  return words;
}

std::string variable(OptionRole role) { return option_of(role).name; }

// "%r rank, %l local rank, ...": report_template.h's rows.
std::string report_sequences() {
  std::string text;
  for (const fsdpskip::ReportSequence& sequence : fsdpskip::kReportSequences)
    text += std::string(text.empty() ? "" : ", ") + "%" + sequence.letter + " " + sequence.meaning;
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions run;
  DoctorOptions doctor_options;
  PluginBuildOptions build_options;
  PluginListOptions list_options;
  ReportOptions report_options;
  const std::vector<Subcommand> table = {
      {{"run"},
       "Run COMMAND with libfsdpskip.so first in LD_PRELOAD",
       {{"--mode", "", "MODE",
         variable(OptionRole::kMode) + " for the job (default: as the environment has it, else " +
             option_of(OptionRole::kMode).default_value + ")",
         accepted_words(OptionRole::kMode), &run.mode},
        {"--report", "", "TEMPLATE",
         variable(OptionRole::kReport) + ": a JSON report per active process (" + report_sequences() + ")", {},
         &run.report_template},
        {"--log", "", "LEVEL", variable(OptionRole::kLogLevel), accepted_words(OptionRole::kLogLevel),
         &run.log_level}},
       "COMMAND [ARGS...]",
       &run.command,
       true,
       "Everything from COMMAND (or after --) on is the command's.\n"
       "Example: fsdpskip run --mode on -- torchrun --nproc_per_node 8 train.py\n",
       [&] {
         if (run.command.empty()) {
           fprintf(stderr, "fsdpskip run: no command given: fsdpskip run [OPTIONS] -- COMMAND [ARGS...]\n");
           return 2;
         }
         return run_command(run);
       }},
      {{"doctor"},
       "Check that fsdpskip can work with a torch installation: symbols, plugin, live probe",
       with(torch_options("check", &doctor_options.python, &doctor_options.libtorch),
            {{"--json", "", "", "print the results as JSON", {}, nullptr, &doctor_options.json},
             {"--json-file", "", "FILE", "also write the results as JSON to FILE (for a site's records)", {},
              &doctor_options.json_file}}),
       "",
       nullptr,
       false,
       "Exit status: 0 when fsdpskip can work with that torch, 1 when something would stop it, 2 when FILE cannot "
       "be written.\n",
       [&] { return doctor(doctor_options); }},
      {{"plugin", "build"},
       "Build the plugin for a torch, into your cache (or the install's plugins with --system)",
       with(torch_options("build for", &build_options.python, &build_options.libtorch),
            {{"--system", "", "", "into the install's lib/fsdpskip/plugins, for every user", {}, nullptr,
              &build_options.system},
             {"--jobs", "-j", "N", "parallel compile jobs (default: one per processor)", {}, nullptr, nullptr,
              &build_options.jobs}}),
       "",
       nullptr,
       false,
       "Needs CMake (3.18 or later) and a C++ compiler; torch's own headers and CMake files.\n"
       "Exit status: 0 when the plugin is built and where the preload finds it, 1 otherwise.\n",
       [&] { return plugin_build(build_options); }},
      {{"plugin", "list"},
       "List the plugins the preload can find, and for which torch",
       {{"--json", "", "", "print them as JSON", {}, nullptr, &list_options.json}},
       "",
       nullptr,
       false,
       "Exit status: 0, with or without plugins.\n",
       [&] { return plugin_list(list_options); }},
      {{"report"},
       "Gather a job's per-process reports into one verdict",
       {{"--json", "", "", "print the table and verdict as JSON", {}, nullptr, &report_options.json}},
       "REPORTS...",
       &report_options.inputs,
       false,
       "REPORTS: report files, or directories holding them.\n"
       "Exit status: 0 pass, 1 a storage is pending or a placeholder never written somewhere (or a report is "
       "unreadable), 2 no reports.\n",
       [&] {
         if (report_options.inputs.empty()) {
           fprintf(stderr, "fsdpskip report: no reports given: fsdpskip report DIRECTORY_OR_FILE... (reports come from "
                           "fsdpskip run --report or FSDPSKIP_REPORT)\n");
           return 2;
         }
         return report(report_options);
       }},
  };
  return dispatch(argc, argv, "fsdpskip: skip the weight initialisation that FSDP's non-zero ranks throw away",
                  FSDPSKIP_VERSION, table);
}
