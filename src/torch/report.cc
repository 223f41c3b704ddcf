#include "report.h"

#include "../common/bytes_text.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fsdpskip {
namespace {

std::string format(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* pattern, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, pattern);
  vsnprintf(buffer, sizeof buffer, pattern, args);
  va_end(args);
  return buffer;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) out += format("\\u%04x", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

const char* base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return path.c_str() + (slash == std::string::npos ? 0 : slash + 1);
}

// True for a file of torch's own Python package (nn.init, nn.Module).
bool in_torch_package(const std::string& file) {
  return file.find("-packages/torch/") != std::string::npos;
}

// The skip site's Python frames, innermost first: "file.py:512 in
// _init_weights" (the file's base name, or its whole path); without torch's
// own frames when asked and any other frame is left.
std::vector<std::string> python_frames_text(const SkipSite& site, bool whole_paths, bool callers_of_torch = false) {
  bool any_other = false;
  for (const PythonFrame& frame : site.stack.python) any_other |= !in_torch_package(frame.file);
  std::vector<std::string> frames;
  // Joined, not formatted: format() cuts at 1 KiB, maybe inside a character.
  for (const PythonFrame& frame : site.stack.python)
    if (!(callers_of_torch && any_other && in_torch_package(frame.file)))
      frames.push_back((whole_paths ? frame.file : std::string(base_name(frame.file))) + ":" +
                       std::to_string(frame.line) + " in " + frame.function);
  return frames;
}

// Its native frames, innermost first, without fsdpskip's own frames; a run
// of frames in one object (torch's dispatcher) shows as its outermost.
std::vector<std::string> native_frames_text(const SkipSite& site) {
  std::vector<std::string> frames;
  std::string previous_object;
  for (int i = 0; i < site.stack.native_depth; ++i) {
    void* address = site.stack.native[i];
    Dl_info info;
    if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
      frames.push_back(format("%p", address));
      previous_object.clear();
      continue;
    }
    std::string object = base_name(info.dli_fname);
    if (object.rfind("libfsdpskip", 0) == 0) continue;
    std::string frame = info.dli_sname ? object + "(" + info.dli_sname + ")"
                                       : object + format("+%#lx", static_cast<unsigned long>(
                                                                     static_cast<char*>(address) -
                                                                     static_cast<char*>(info.dli_fbase)));
    if (object == previous_object) frames.back() = frame;
    else frames.push_back(frame);
    previous_object = object;
  }
  return frames;
}

// The site's stack for a line on stderr, after `lead`: the Python frames say
// where in the user's code (torch's own Python, nn.init's helpers, is left
// to the report); a few native ones say which torch function.
std::string where_text(const SkipSite& site, const char* lead) {
  std::vector<std::string> python = python_frames_text(site, false, true), native = native_frames_text(site);
  std::string text;
  size_t shown = 0;
  for (size_t i = 0; i < python.size() && i < 3; ++i) text += (shown++ ? " < " : lead) + python[i];
  for (size_t i = 0; i < native.size() && shown < 6; ++i) text += (shown++ ? " < " : lead) + native[i];
  return text;
}

// "normal_" for a skipped storage's first kernel; "none" for a placeholder
// that nothing wrote.
const char* first_kernel_name(const SkipSite& site) {
  return site.first_kernel == FSDPSKIP_NO_KERNEL ? "none" : kernel_name(site.first_kernel);
}

// What FSDPSKIP_ON_PENDING=abort does, in both lines that announce it.
std::string ending_the_process() {
  return format("FSDPSKIP_ON_PENDING=abort: ending the process with exit status %d", kPendingExitStatus);
}

}  // namespace

std::string counter_text(const ReportKey& row, uint64_t value) {
  switch (row.unit) {
    case CounterUnit::kBytes: return bytes_text(value);
    case CounterUnit::kNanoseconds: return format("%.1f ms", value / 1e6);
    case CounterUnit::kCount: break;
  }
  return std::to_string(value);
}

std::string summary_line(const ReportContext& context, const Stats& stats, bool audit) {
  uint64_t calls = 0;
  std::string per_kernel;
  for (int k = 0; k < FSDPSKIP_KERNEL_COUNT; ++k) {
    calls += stats.calls[k];
    if (stats.calls[k]) per_kernel += format("%s%s %llu", per_kernel.empty() ? "" : ", ", kernel_name(static_cast<fsdpskip_kernel>(k)),
                                             static_cast<unsigned long long>(stats.calls[k]));
  }
  std::string line = format("local rank %d pid %d: %s %llu calls (%s)", context.host->local_rank, context.pid,
                            audit ? "audit: would skip" : "skipped", static_cast<unsigned long long>(calls),
                            per_kernel.empty() ? "none" : per_kernel.c_str());
  for (int c = 0; c < kCounterCount; ++c) {
    const ReportKey& row = *kCounterRows.rows[c];
    uint64_t value = stats.values[c];
    if (*row.summary == '\0' || (row.shown == CounterShown::kNonZero && value == 0)) continue;
    line += format(row.summary, counter_text(row, value).c_str());
  }
  return line;
}

std::string nothing_skipped_line(const ReportContext& context, const Stats& stats) {
  return format("local rank %d pid %d: nothing skipped: %llu parameter storages tagged, none initialised before rank "
                "0's data arrived; %s",
                context.host->local_rank, context.pid,
                static_cast<unsigned long long>(stats[Counter::storages_tagged]), kNothingSkippedReason);
}

std::string pending_line(const SkipSite& site) {
  std::string line = format("pending storage %s %s on %s, %s: skipped (%s) and never received rank 0's data",
                            site.shape.c_str(), site.dtype.c_str(), site.device.c_str(),
                            bytes_text(site.bytes).c_str(), kernel_name(site.first_kernel));
  return line + where_text(site, "; skipped at ");
}

std::string unsendable_stop_line(const std::string& collective, size_t count) {
  return format("%s would send %zu skipped storages of this rank that fsdpskip cannot give the values they would "
                "have had without it: this rank is a source of the sync, so its inits must run; run the ranks that "
                "send with FSDPSKIP=off (or without the preload); ending the process with exit status %d before it "
                "sends them",
                collective.c_str(), count, kPendingExitStatus);
}

std::string unsendable_line(const SkipSite& site, const std::string& why) {
  std::string line = format("unsendable storage %s %s on %s, %s: skipped (%s); %s", site.shape.c_str(),
                            site.dtype.c_str(), site.device.c_str(), bytes_text(site.bytes).c_str(),
                            kernel_name(site.first_kernel), why.c_str());
  return line + where_text(site, "; skipped at ");
}

std::string unmaterializable_stop_line(const std::string& access) {
  return format("%s is about to touch a skipped storage that fsdpskip cannot give the values it would have had "
                "without it; run this rank with FSDPSKIP=off (or without the preload); ending the process with exit "
                "status %d before the access",
                access.c_str(), kPendingExitStatus);
}

std::string never_written_line(const SkipSite& site) {
  std::string line = format("never-written storage %s %s on %s, %s: a placeholder that nothing wrote before training "
                            "began (no init, copy, fill, broadcast or receive, no page in memory): it holds no "
                            "values of rank 0's",
                            site.shape.c_str(), site.dtype.c_str(), site.device.c_str(), bytes_text(site.bytes).c_str());
  return line + where_text(site, "; made at ");
}

std::string never_written_abort_line(size_t never_written) {
  return format("training began with %zu never-written placeholders; ", never_written) + ending_the_process();
}

std::string pending_in_training_line(size_t bytes, size_t pending, bool rank0_data_seen, bool audit, bool aborting) {
  std::string line = format("training began (a collective of %zu bytes) %s: %zu %s", bytes,
                            rank0_data_seen ? "after rank 0's broadcast, which did not cover every skipped storage"
                                            : "before any broadcast from rank 0 was seen",
                            pending, audit ? "storages would stay pending (audit: their inits ran)"
                                           : "skipped storages were still pending");
  if (!audit && !aborting)
    line += rank0_data_seen ? "; no sync covers them (an evaluation-only, reference or reward model?): their inits "
                              "run now, as without fsdpskip, and this rank holds its own init there"
                            : "; their inits run now, as without fsdpskip: this rank holds its own init where it "
                              "may have been meant to hold rank 0's values";
  line += aborting ? "; " + ending_the_process() : std::string("; FSDPSKIP_ON_PENDING=abort stops the process here");
  return line;
}

std::string report_json(const ReportContext& context, const Stats& stats, const std::vector<SkipSite>& pending,
                        const std::vector<SkipSite>& never_written, bool audit) {
  std::string json = format("{\n  \"schema\": \"%s\",\n  \"schema_version\": %d,\n", kReportSchema,
                            kReportSchemaVersion);
  json += format("  \"host\": %s,\n  \"pid\": %d,\n  \"rank\": %d,\n  \"local_rank\": %d,\n  \"world_size\": %d,\n"
                 "  \"local_world_size\": %d,\n",
                 json_string(context.hostname).c_str(), context.pid, context.host->rank, context.host->local_rank,
                 context.host->world_size, context.host->local_world_size);
  json += format("  \"mode\": \"%s\",\n  \"loading_ended\": %s,\n  \"calls\": {", audit ? "audit" : "on",
                 stats.loading_ended ? "true" : "false");
  for (int k = 0; k < FSDPSKIP_KERNEL_COUNT; ++k)
    if (fsdpskip_role_of(static_cast<fsdpskip_kernel>(k)) != FSDPSKIP_ROLE_READ)  // never skipped
      json += format("%s\"%s\": %llu", k ? ", " : "", kernel_name(static_cast<fsdpskip_kernel>(k)),
                     static_cast<unsigned long long>(stats.calls[k]));
  json += "}";
  for (int c = 0; c < kCounterCount; ++c)
    json += format(",\n  \"%s\": %llu", kCounterRows.rows[c]->key, static_cast<unsigned long long>(stats.values[c]));
  auto sites = [&](const char* key, const std::vector<SkipSite>& list) {
    json += format(",\n  \"%s\": [", key);
    for (size_t i = 0; i < list.size(); ++i) {
      const SkipSite& site = list[i];
      json += format("%s\n    {\"shape\": %s, \"dtype\": %s, \"device\": %s, \"bytes\": %zu, \"kernel\": \"%s\", "
                     "\"stack\": [",
                     i ? "," : "", json_string(site.shape).c_str(), json_string(site.dtype).c_str(),
                     json_string(site.device).c_str(), site.bytes, first_kernel_name(site));
      std::vector<std::string> frames = python_frames_text(site, true), native = native_frames_text(site);
      frames.insert(frames.end(), native.begin(), native.end());
      for (size_t f = 0; f < frames.size(); ++f) json += (f ? ", " : "") + json_string(frames[f]);
      json += "]}";
    }
    json += list.empty() ? "]" : "\n  ]";
  };
  sites("pending", pending);
  sites("never_written", never_written);
  json += "\n}\n";
  return json;
}

}  // namespace fsdpskip
