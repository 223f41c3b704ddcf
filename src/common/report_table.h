// report.def as data: the plugin writes the report from it, the command
// reads it back by the same keys, the README's table is rendered from it.
#pragma once

#include <cstdint>

namespace fsdpskip {

inline constexpr const char kReportSchema[] = "fsdpskip-report";
inline constexpr int kReportSchemaVersion = 3;  // 2: storages_tagged; 3: storages_replayed
inline constexpr int kOldestReportSchemaVersion = 1;

enum class Counter {
#define FIELD(key, meaning)
#define COUNTER(key, since, unit, summary, shown, meaning) key,
#include "report.def"
#undef COUNTER
#undef FIELD
};

enum class CounterUnit { kCount, kBytes, kNanoseconds };
enum class CounterShown { kAlways, kNonZero };

struct ReportKey {
  const char* key;
  bool counter;  // false: a FIELD row
  int since;     // the schema version that added it
  CounterUnit unit;
  const char* summary;
  CounterShown shown;
  const char* meaning;
};

// Every row of report.def, in order (fields and counters).
inline constexpr ReportKey kReportKeys[] = {
#define FIELD(key, meaning) {#key, false, 1, CounterUnit::kCount, "", CounterShown::kAlways, meaning},
#define COUNTER(key, since, unit, summary, shown, meaning) \
  {#key, true, since, CounterUnit::unit, summary, CounterShown::shown, meaning},
#include "report.def"
#undef COUNTER
#undef FIELD
};

// The counter rows alone, indexed by Counter.
struct CounterRows {
  const ReportKey* rows[sizeof kReportKeys / sizeof *kReportKeys];
  int count;
};

inline constexpr CounterRows kCounterRows = [] {
  CounterRows result{};
  for (const ReportKey& row : kReportKeys)
    if (row.counter) result.rows[result.count++] = &row;
  return result;
}();

inline constexpr int kCounterCount = kCounterRows.count;

inline const ReportKey& counter_row(Counter counter) { return *kCounterRows.rows[static_cast<int>(counter)]; }
inline const char* key(Counter counter) { return counter_row(counter).key; }

// The counters of one process, indexed by Counter.
struct Counters {
  uint64_t values[kCounterCount] = {};
  uint64_t& operator[](Counter counter) { return values[static_cast<int>(counter)]; }
  uint64_t operator[](Counter counter) const { return values[static_cast<int>(counter)]; }
};

// A rank that tagged parameters and then received rank 0's data, having
// skipped no call and zeroed nothing lazily while loading: there was nothing
// to save. The summary at exit and `fsdpskip report` say so, after "nothing
// skipped: ", with this reason. Helpers that made a parameter or two never
// see rank 0's data and stay quiet.
inline bool had_nothing_to_save(uint64_t skipped_calls, const Counters& counters, bool loading_ended) {
  return skipped_calls == 0 && counters[Counter::lazy_zero_bytes_never_committed] == 0 &&
         counters[Counter::internal_errors] == 0 && counters[Counter::storages_tagged] != 0 && loading_ended;
}
inline constexpr const char kNothingSkippedReason[] =
    "its parameters were most likely loaded rather than initialised (transformers >= 5.23 reads the checkpoint on "
    "every rank) or made as small zeros placeholders: fsdpskip has nothing to save here";

}  // namespace fsdpskip
