// `fsdpskip report`: the per-process JSON reports of a job (their keys are
// report.def's) gathered into one table and one verdict. The verdict fails
// when any process left a storage pending or a placeholder never written,
// when a report cannot be read (a process that died while writing leaves
// only its .partial file), or when a rank that should have written one did
// not (the job's size is in the reports).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/bytes_text.h"
#include "../common/report_table.h"
#include "json_fields.h"
#include "report.h"
#include "text_table.h"

namespace fsdpskip::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Process {
  std::string file;
  json report;
  Counters counters;  // read_report checked every one
};

struct Gathered {
  std::vector<Process> processes;
  std::vector<std::string> problems;  // unreadable, foreign or incomplete reports
};

uint64_t skipped_calls(const json& report) {
  uint64_t total = 0;
  if (auto calls = report.find("calls"); calls != report.end() && calls->is_object())
    for (const auto& [kernel, count] : calls->items())
      if (count.is_number_unsigned()) total += count.get<uint64_t>();
  return total;
}

void read_report(const fs::path& path, Gathered* gathered) {
  std::ifstream in(path);
  json report = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.is_object()) {
    gathered->problems.push_back(path.string() + ": not JSON, or truncated");
    return;
  }
  if (text_field(report, "schema", "") != kReportSchema) {
    gathered->problems.push_back(path.string() + ": not a fsdpskip report (no \"schema\": \"" + kReportSchema + "\")");
    return;
  }
  int64_t version = integer_field(report, "schema_version", 0);
  if (version < kOldestReportSchemaVersion || version > kReportSchemaVersion) {
    gathered->problems.push_back(path.string() + ": schema version " + json_text(report.value("schema_version", json())) +
                                 ", this fsdpskip reads versions " + std::to_string(kOldestReportSchemaVersion) +
                                 " to " + std::to_string(kReportSchemaVersion));
    return;
  }
  // fsdpskip's own writer gives every counter of its version: one missing or
  // of another type is a report this command cannot vouch for. A counter
  // newer than the report reads as 0.
  Counters counters;
  for (int c = 0; c < kCounterCount; ++c) {
    const ReportKey& row = *kCounterRows.rows[c];
    const json* value = field(report, row.key);
    if (value == nullptr && row.since > version) {
      report[row.key] = uint64_t{0};
    } else if (value == nullptr || !value->is_number_unsigned()) {
      gathered->problems.push_back(path.string() + ": \"" + row.key + "\" is missing or not a count");
      return;
    } else {
      counters.values[c] = value->get<uint64_t>();
    }
  }
  gathered->processes.push_back({path.string(), std::move(report), counters});
}

bool is_partial(const fs::path& path) { return path.filename().string().find(".partial.") != std::string::npos; }

Gathered gather(const std::vector<std::string>& inputs, std::string* error) {
  Gathered gathered;
  for (const std::string& input : inputs) {
    std::error_code failure;
    if (fs::is_directory(input, failure)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::recursive_directory_iterator(input, failure))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& file : files) {
        if (is_partial(file))
          gathered.problems.push_back(file.string() + ": incomplete (the process ended while writing its report)");
        else if (file.extension() == ".json")
          read_report(file, &gathered);
      }
    } else if (fs::exists(input, failure)) {
      read_report(input, &gathered);
    } else {
      *error = input + ": no such file or directory";
      return gathered;
    }
  }
  if (gathered.processes.empty() && gathered.problems.empty())
    *error = "no reports (*.json) found in " + inputs.front() + (inputs.size() > 1 ? " …" : "") +
             ": run the job with FSDPSKIP_REPORT (or fsdpskip run --report)";
  return gathered;
}

std::string integer(const json& report, const char* key) {
  const json* value = field(report, key);
  return value && value->is_number_integer() ? std::to_string(value->get<int64_t>()) : "?";
}

// Whether every rank that should have written a report did. Only active
// ranks write one: every local rank from 1 on, none of the local ranks 0.
// The job's size comes from the reports themselves (world_size and
// local_world_size, schema 2); the ranks expected are named under the
// launchers' block layout (global rank = node * local_world_size + local
// rank, as torchrun and srun's default place them), and counted otherwise.
struct Completeness {
  std::string unknown;               // why it cannot be checked ("" when it was)
  int64_t expected = 0;              // reports the job should have left
  std::vector<int64_t> missing;      // the ranks without one (block layout)
  int64_t missing_count = 0;         // how many are missing, named or not
};

Completeness completeness(const std::vector<Process>& processes) {
  Completeness result;
  int64_t world = -1, local = -1;
  for (const Process& process : processes) {
    int64_t w = integer_field(process.report, "world_size", -1), l = integer_field(process.report, "local_world_size", -1);
    if (w <= 0 || l <= 0) continue;
    if (world > 0 && (w != world || l != local)) {
      result.unknown = "the reports disagree on the job's size (world size " + std::to_string(world) + " and " +
                       std::to_string(w) + "): reports of several jobs?";
      return result;
    }
    world = w, local = l;
  }
  if (world <= 0) {
    result.unknown = "no report says the job's size (WORLD_SIZE and LOCAL_WORLD_SIZE, or SLURM_NTASKS and "
                     "SLURM_NTASKS_PER_NODE, were not set)";
    return result;
  }
  if (local > world || world % local != 0) {
    result.unknown = "world size " + std::to_string(world) + " is not a whole number of nodes of " +
                     std::to_string(local) + " ranks";
    return result;
  }
  result.expected = world - world / local;
  std::vector<bool> seen(world, false);
  bool block = true;
  for (const Process& process : processes) {
    int64_t rank = integer_field(process.report, "rank", -1), local_rank = integer_field(process.report, "local_rank", -1);
    if (rank >= 0 && rank < world && rank % local == local_rank) seen[rank] = true;
    else block = false;
  }
  if (!block) {  // another layout: how many, not which
    result.missing_count = std::max<int64_t>(0, result.expected - static_cast<int64_t>(processes.size()));
    return result;
  }
  for (int64_t rank = 0; rank < world; ++rank)
    if (rank % local != 0 && !seen[rank]) result.missing.push_back(rank);
  result.missing_count = result.missing.size();
  return result;
}

std::string missing_text(const Completeness& c) {
  std::string text = std::to_string(c.missing_count) + " of the " + std::to_string(c.expected) +
                     " expected reports missing (every local rank from 1 writes one)";
  if (!c.missing.empty()) {
    text += ": rank" + std::string(c.missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < c.missing.size() && i < 20; ++i) text += (i ? ", " : "") + std::to_string(c.missing[i]);
    if (c.missing.size() > 20) text += ", …";
  }
  return text + "; did they run under fsdpskip and reach exit?";
}

}  // namespace

int report(const ReportOptions& options) {
  std::string error;
  Gathered gathered = gather(options.inputs, &error);
  if (!error.empty()) {
    fprintf(stderr, "fsdpskip report: %s\n", error.c_str());
    return 2;
  }
  std::sort(gathered.processes.begin(), gathered.processes.end(), [](const Process& a, const Process& b) {
    auto key = [](const json& r) {
      return std::make_tuple(text_field(r, "host", ""), integer_field(r, "rank", -1), integer_field(r, "local_rank", -1),
                             integer_field(r, "pid", 0));
    };
    return key(a.report) < key(b.report);
  });

  uint64_t calls = 0, never_committed = 0, resolved = 0, pending = 0;
  std::vector<std::string> reasons = gathered.problems, notes;
  for (const Process& process : gathered.processes) {
    const json& r = process.report;
    uint64_t calls_here = skipped_calls(r);
    calls += calls_here;
    const Counters& counters = process.counters;
    never_committed += counters[Counter::bytes_never_committed];
    resolved += counters[Counter::resolved_by_overwrite] + counters[Counter::resolved_by_free];
    uint64_t pending_here = counters[Counter::pending_count];
    pending += pending_here;
    std::string who = text_field(r, "host", "?") + " rank " + integer(r, "rank") + " pid " + integer(r, "pid");
    if (pending_here)
      reasons.push_back(who + ": " + std::to_string(pending_here) + " storage(s) pending: never received rank 0's data");
    if (uint64_t never_written = counters[Counter::storages_never_written])
      reasons.push_back(who + ": " + std::to_string(never_written) +
                        " placeholder(s) never written before training began: they hold no values of rank 0's");
    bool loading_ended = flag_field(r, "loading_ended", false);
    if (calls_here && !loading_ended)
      notes.push_back(who + ": skipped inits but saw no broadcast from rank 0");
    if (had_nothing_to_save(calls_here, counters, loading_ended))
      notes.push_back(who + ": nothing skipped: " + kNothingSkippedReason);
  }
  Completeness complete = completeness(gathered.processes);
  if (complete.unknown.empty() && complete.missing_count) reasons.push_back(missing_text(complete));
  if (!complete.unknown.empty()) notes.push_back("cannot check for missing reports: " + complete.unknown);
  bool pass = reasons.empty();

  if (options.json) {
    json out = {{"verdict", pass ? "pass" : "fail"},
                {"reasons", reasons},
                {"notes", notes},
                {"totals",
                 {{"processes", gathered.processes.size()},
                  {"expected_reports", complete.unknown.empty() ? json(complete.expected) : json()},
                  {"missing_ranks", complete.missing},
                  {"skipped_calls", calls},
                  {key(Counter::bytes_never_committed), never_committed},
                  {"resolved", resolved},
                  {"pending", pending}}},
                {"processes", json::array()}};
    for (const Process& process : gathered.processes) {
      json row = process.report;
      row["file"] = process.file;
      out["processes"].push_back(std::move(row));
    }
    printf("%s\n", json_text(out, 2).c_str());
    return pass ? 0 : 1;
  }

  TextTable table({"host", "rank", "local", "pid", "mode", "skipped calls", "never committed", "resolved", "pending"});
  for (const Process& process : gathered.processes) {
    const json& r = process.report;
    const Counters& counters = process.counters;
    table.add({text_field(r, "host", "?"), integer(r, "rank"), integer(r, "local_rank"), integer(r, "pid"),
               text_field(r, "mode", "?"), std::to_string(skipped_calls(r)),
               bytes_text(counters[Counter::bytes_never_committed]),
               std::to_string(counters[Counter::resolved_by_overwrite] + counters[Counter::resolved_by_free]),
               std::to_string(counters[Counter::pending_count])});
  }
  table.add({"all", "", "", "", "", std::to_string(calls), bytes_text(never_committed), std::to_string(resolved),
             std::to_string(pending)});
  printf("%s", table.render().c_str());
  for (const std::string& note : notes) printf("note: %s\n", note.c_str());
  for (const std::string& reason : reasons) printf("FAIL: %s\n", reason.c_str());
  printf("verdict: %s (%zu process report%s)\n", pass ? "pass: every skipped storage received rank 0's data" : "fail",
         gathered.processes.size(), gathered.processes.size() == 1 ? "" : "s");
  return pass ? 0 : 1;
}

}  // namespace fsdpskip::cli
