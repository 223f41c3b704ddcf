// fsdpskip: run a command under the preload, check a torch installation,
// build and list plugins for the torches on the machine, gather a job's reports. `fsdpskip SUBCOMMAND --help` for each.
#include <CLI/CLI.hpp>

#include "doctor.h"
#include "plugin.h"
#include "report.h"
#include "run.h"

using namespace fsdpskip::cli;

int main(int argc, char** argv) {
  CLI::App app{"fsdpskip: skip the weight initialisation that FSDP's non-zero ranks throw away"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(FSDPSKIP_VERSION));

  RunOptions run;
  CLI::App* run_app = app.add_subcommand("run", "Run COMMAND with libfsdpskip.so first in LD_PRELOAD");
  run_app->add_option("--mode", run.mode, "FSDPSKIP for the job (default: as the environment has it, else auto)")
      ->check(CLI::IsMember({"auto", "on", "off", "audit"}));
  run_app->add_option("--report", run.report_template,
                      "FSDPSKIP_REPORT: a JSON report per active process (%r rank, %l local rank, %p pid, %h host, "
                      "%j SLURM_JOB_ID)");
  run_app->add_option("--log", run.log_level, "FSDPSKIP_LOG")
      ->check(CLI::IsMember({"quiet", "summary", "debug", "trace"}));
  // Everything from the first word that is not one of ours is the command.
  run_app->prefix_command();
  run_app->allow_extras();
  run_app->footer("Example: fsdpskip run --mode on -- torchrun --nproc_per_node 8 train.py\n");

  DoctorOptions doctor_options;
  CLI::App* doctor_app = app.add_subcommand(
      "doctor", "Check that fsdpskip can work with a torch installation: symbols, plugin, live probe");
  auto* python = doctor_app->add_option("--python", doctor_options.python, "a Python whose torch to check")
                     ->default_str("python3");
  doctor_app->add_option("--libtorch", doctor_options.libtorch, "a LibTorch directory to check instead")
      ->excludes(python)
      ->check(CLI::ExistingDirectory);
  doctor_app->add_flag("--json", doctor_options.json, "print the results as JSON");
  doctor_app->footer("Exit status: 0 when fsdpskip can work with that torch, 1 when something would stop it.\n");

  PluginBuildOptions build_options;
  PluginListOptions list_options;
  CLI::App* plugin_app = app.add_subcommand("plugin", "Build and list the torch plugins of this install");
  plugin_app->require_subcommand(1);
  CLI::App* build_app = plugin_app->add_subcommand(
      "build", "Build the plugin for a torch, into your cache (or the install's plugins with --system)");
  auto* build_python = build_app->add_option("--python", build_options.python, "a Python whose torch to build for")
                           ->default_str("python3");
  build_app->add_option("--libtorch", build_options.libtorch, "a LibTorch directory to build for instead")
      ->excludes(build_python)
      ->check(CLI::ExistingDirectory);
  build_app->add_flag("--system", build_options.system, "into the install's lib/fsdpskip/plugins, for every user");
  build_app->add_option("-j,--jobs", build_options.jobs, "parallel compile jobs (default: one per processor)");
  build_app->footer("Needs CMake (3.18 or later) and a C++ compiler; torch's own headers and CMake files.\n");
  CLI::App* list_app = plugin_app->add_subcommand("list", "List the plugins the preload can find, and for which torch");
  list_app->add_flag("--json", list_options.json, "print them as JSON");

  ReportOptions report_options;
  CLI::App* report_app = app.add_subcommand("report", "Gather a job's per-process reports into one verdict");
  report_app->add_option("reports", report_options.inputs, "report files, or directories holding them")
      ->required();
  report_app->add_flag("--json", report_options.json, "print the table and verdict as JSON");
  report_app->footer(
      "Exit status: 0 pass, 1 a storage is pending somewhere (or a report is unreadable), 2 no reports.\n");

  // `run [OPTIONS] -- COMMAND...`: the command is split off here, since CLI11
  // hands what follows "--" to the top-level app, not to the subcommand.
  std::vector<std::string> after_separator;
  if (argc > 1 && std::string(argv[1]) == "run")
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--") {
        after_separator.assign(argv + i + 1, argv + argc);
        argc = i;
        break;
      }
  const std::string first = argc > 1 ? argv[1] : "";
  if (!first.empty() && first[0] != '-' && first != "run" && first != "doctor" && first != "report" &&
      first != "plugin") {
    fprintf(stderr, "fsdpskip: unknown subcommand '%s' (run, doctor, plugin, report; fsdpskip --help)\n", first.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int status = app.exit(error);  // prints the help, or the error and a pointer to --help
    return status == 0 ? 0 : 2;
  }
  if (doctor_options.python.empty() && doctor_options.libtorch.empty()) doctor_options.python = "python3";
  if (build_options.python.empty() && build_options.libtorch.empty()) build_options.python = "python3";
  if (*run_app) {
    run.command = run_app->remaining();
    run.command.insert(run.command.end(), after_separator.begin(), after_separator.end());
    if (run.command.empty()) {
      fprintf(stderr, "fsdpskip run: no command given: fsdpskip run [OPTIONS] -- COMMAND [ARGS...]\n");
      return 2;
    }
    return run_command(run);
  }
  if (*doctor_app) return doctor(doctor_options);
  if (*build_app) return plugin_build(build_options);
  if (*list_app) return plugin_list(list_options);
  return report(report_options);
}
