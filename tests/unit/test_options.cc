// The activation policy, driven with a fake environment.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "../common/options_table.h"
#include "../common/report_template.h"
#include "options.h"

namespace fsdpskip {
namespace {

using Environment = std::map<std::string, std::string>;

const char* lookup(const char* name, void* context) {
  auto* environment = static_cast<Environment*>(context);
  auto found = environment->find(name);
  return found == environment->end() ? nullptr : found->second.c_str();
}

Options resolve(Environment environment) { return resolve_options(lookup, &environment); }

TEST(Options, NothingSetIsInactiveAndSilent) {
  Options options = resolve({});
  EXPECT_FALSE(options.active);
  EXPECT_STREQ(options.error, "");
}

TEST(Options, AutoNeedsBothAccelerateVariables) {
  EXPECT_FALSE(resolve({{"LOCAL_RANK", "1"}}).active);
  EXPECT_FALSE(resolve({{"LOCAL_RANK", "1"}, {"ACCELERATE_USE_FSDP", "true"}}).active);
  EXPECT_FALSE(resolve({{"LOCAL_RANK", "1"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}}).active);
  EXPECT_TRUE(
      resolve({{"LOCAL_RANK", "1"}, {"ACCELERATE_USE_FSDP", "True"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}}).active);
  EXPECT_FALSE(
      resolve({{"LOCAL_RANK", "1"}, {"ACCELERATE_USE_FSDP", "false"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}})
          .active);
}

TEST(Options, AutoIsInactiveOnRankZero) {
  EXPECT_FALSE(
      resolve({{"LOCAL_RANK", "0"}, {"ACCELERATE_USE_FSDP", "1"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}}).active);
}

TEST(Options, TruthyMatchesStrtobool) {
  for (const char* word : {"1", "y", "YES", "t", "True", "ON"}) {
    bool value = false;
    EXPECT_TRUE(parse_truthy(word, &value)) << word;
    EXPECT_TRUE(value) << word;
  }
  for (const char* word : {"0", "n", "No", "f", "FALSE", "off"}) {
    bool value = true;
    EXPECT_TRUE(parse_truthy(word, &value)) << word;
    EXPECT_FALSE(value) << word;
  }
  bool value;
  for (const char* word : {"", "2", "yess", " true", "enabled"}) EXPECT_FALSE(parse_truthy(word, &value)) << word;
}

TEST(Options, OnNeedsALocalRankOfOneOrMore) {
  EXPECT_FALSE(resolve({{"FSDPSKIP", "on"}}).active);
  EXPECT_FALSE(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "0"}}).active);
  Options options = resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "3"}});
  EXPECT_TRUE(options.active);
  EXPECT_EQ(options.local_rank, 3);
  EXPECT_EQ(options.mode, Mode::kOn);
}

TEST(Options, OffIsInertWhateverElseIsSet) {
  Options options = resolve({{"FSDPSKIP", "off"}, {"LOCAL_RANK", "x1"}, {"FSDPSKIP_LOG", "loud"}});
  EXPECT_FALSE(options.active);
  EXPECT_STRNE(options.error, "") << "FSDPSKIP_LOG is checked first";
  EXPECT_STREQ(resolve({{"FSDPSKIP", "off"}, {"LOCAL_RANK", "x1"}}).error, "");
}

TEST(Options, AuditIsActiveInAuditMode) {
  Options options = resolve({{"FSDPSKIP", "AUDIT"}, {"LOCAL_RANK", "1"}});
  EXPECT_TRUE(options.active);
  EXPECT_EQ(options.mode, Mode::kAudit);
}

TEST(Options, LocalRankPrecedence) {
  Environment all = {{"FSDPSKIP", "on"},         {"FSDPSKIP_LOCAL_RANK", "5"},        {"LOCAL_RANK", "4"},
                     {"SLURM_LOCALID", "3"},     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"MPI_LOCALRANKID", "1"},
                     {"PALS_LOCAL_RANKID", "6"}};
  const char* order[] = {"FSDPSKIP_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "MPI_LOCALRANKID", "PALS_LOCAL_RANKID"};
  int expected[] = {5, 4, 3, 2, 1, 6};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(resolve(all).local_rank, expected[i]) << "with " << order[i] << " first";
    all.erase(order[i]);
  }
  EXPECT_EQ(resolve(all).local_rank, -1);
}

TEST(Options, FsdpskipLocalRankZeroOverridesLauncher) {
  EXPECT_FALSE(resolve({{"FSDPSKIP", "on"}, {"FSDPSKIP_LOCAL_RANK", "0"}, {"LOCAL_RANK", "1"}}).active);
}

TEST(Options, MalformedValuesNameVariableValueAndAcceptedAndStayInert) {
  struct Case {
    Environment environment;
    const char* variable;
    const char* value;
    const char* accepted;
  } cases[] = {
      {{{"FSDPSKIP", "maybe"}, {"LOCAL_RANK", "1"}}, "FSDPSKIP", "maybe", "auto, on, off, audit"},
      {{{"FSDPSKIP", "on"}, {"LOCAL_RANK", "x1"}}, "LOCAL_RANK", "x1", "non-negative integer"},
      {{{"FSDPSKIP", "on"}, {"LOCAL_RANK", "-1"}}, "LOCAL_RANK", "-1", "non-negative integer"},
      {{{"FSDPSKIP", "on"}, {"SLURM_LOCALID", ""}}, "SLURM_LOCALID", "", "non-negative integer"},
      {{{"FSDPSKIP", "on"}, {"LOCAL_RANK", "99999999999"}}, "LOCAL_RANK", "99999999999", "non-negative integer"},
      {{{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_LOG", "chatty"}}, "FSDPSKIP_LOG", "chatty", "quiet"},
      {{{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_ON_PENDING", "stop"}}, "FSDPSKIP_ON_PENDING", "stop",
       "warn, abort"},
      {{{"ACCELERATE_USE_FSDP", "sure"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}, {"LOCAL_RANK", "1"}},
       "ACCELERATE_USE_FSDP", "sure", "true"},
  };
  for (const Case& c : cases) {
    Options options = resolve(c.environment);
    EXPECT_FALSE(options.active) << c.variable;
    std::string error = options.error;
    EXPECT_NE(error.find(std::string(c.variable) + "=\"" + c.value + "\""), std::string::npos) << error;
    EXPECT_NE(error.find(c.accepted), std::string::npos) << error;
    EXPECT_NE(error.find("inactive"), std::string::npos) << error;
  }
}

TEST(Options, LogLevelsAndPaths) {
  // report_template points into the environment (found by ASan: a
  // temporary's was read after it was gone).
  Environment environment = {{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_LOG", "quiet"},
                             {"FSDPSKIP_REPORT", "/tmp/r-%r.json"}, {"RANK", "7"}};
  Options options = resolve_options(lookup, &environment);
  EXPECT_EQ(options.log_level, FSDPSKIP_LOG_QUIET);
  EXPECT_STREQ(options.report_template, "/tmp/r-%r.json");
  EXPECT_EQ(options.rank, 7);
  EXPECT_EQ(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_LOG", "TRACE"}}).log_level,
            FSDPSKIP_LOG_TRACE);
  EXPECT_EQ(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_REPORT", ""}}).report_template, nullptr);
  EXPECT_EQ(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}}).on_pending, FSDPSKIP_ON_PENDING_WARN);
  EXPECT_EQ(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "1"}, {"FSDPSKIP_ON_PENDING", "Abort"}}).on_pending,
            FSDPSKIP_ON_PENDING_ABORT);
}

TEST(Options, ReasonNamesWhatDecided) {
  EXPECT_STREQ(resolve({{"LOCAL_RANK", "1"}}).reason, "mode auto, ACCELERATE_USE_FSDP is unset");
  EXPECT_STREQ(resolve({{"LOCAL_RANK", "1"}, {"ACCELERATE_USE_FSDP", "1"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "no"}})
                   .reason,
               "mode auto, FSDP_CPU_RAM_EFFICIENT_LOADING=no");
  EXPECT_STREQ(resolve({{"FSDPSKIP", "off"}}).reason, "FSDPSKIP=off");
  EXPECT_STREQ(resolve({{"FSDPSKIP", "on"}, {"SLURM_LOCALID", "2"}}).reason,
               "mode on (FSDPSKIP=on), local rank 2 from SLURM_LOCALID");
  EXPECT_STREQ(resolve({{"FSDPSKIP", "on"}}).reason, "mode on (FSDPSKIP=on), no local rank variable is set");
  EXPECT_STREQ(resolve({{"FSDPSKIP", "maybe"}}).reason, "FSDPSKIP is malformed");
  EXPECT_STREQ(resolve({{"FSDPSKIP", "on"}, {"LOCAL_RANK", "0"}}).reason,
               "mode on (FSDPSKIP=on), local rank 0 from LOCAL_RANK (local rank 0 reads the checkpoint)");
  EXPECT_STREQ(resolve({{"LOCAL_RANK", "1"}, {"ACCELERATE_USE_FSDP", "True"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}})
                   .reason,
               "mode auto (ACCELERATE_USE_FSDP=True, FSDP_CPU_RAM_EFFICIENT_LOADING=1), local rank 1 from LOCAL_RANK");
}

TEST(Options, PolicyVariablesAreExactlyTheOnesRead) {
  for (const char* name : {"FSDPSKIP", "FSDPSKIP_LOG", "FSDPSKIP_REPORT", "FSDPSKIP_PLUGIN", "FSDPSKIP_LOCAL_RANK",
                           "LOCAL_RANK", "SLURM_LOCALID", "RANK", "SLURM_PROCID", "ACCELERATE_USE_FSDP",
                           "FSDP_CPU_RAM_EFFICIENT_LOADING", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS"})
    EXPECT_TRUE(is_policy_variable(name, strlen(name))) << name;
  for (const char* name : {"PATH", "FSDPSKIPX", "FSDPSKI", "LOCAL_RANKS", "RAN", "", "WORLD_SIZES", "MASTER_ADDR"})
    EXPECT_FALSE(is_policy_variable(name, strlen(name))) << name;
  // Not NUL-terminated: putenv hands "NAME=value".
  EXPECT_TRUE(is_policy_variable("LOCAL_RANK=1", 10));
  EXPECT_FALSE(is_policy_variable("LOCAL_RANK=1", 9));
  EXPECT_TRUE(states_loading("FSDPSKIP=on", 8));
  EXPECT_TRUE(states_loading("ACCELERATE_USE_FSDP", 19));
  EXPECT_FALSE(states_loading("FSDPSKIP_LOG", 12));
  EXPECT_FALSE(states_loading("LOCAL_RANK", 10));
  // A name with a NUL inside its length (tools/fuzz found the row's name read past its end).
  EXPECT_FALSE(is_policy_variable("FSDPSKIP\0\0\0\0\0\0\0\0", 16));
}

// FSDPSKIP_REPORT's meaning (options.def: the documentation's table, the
// command's help) names the sequences the plugin expands, in their order.
TEST(Options, ReportMeaningNamesTheTemplatesSequences) {
  std::string meaning = option_of(OptionRole::kReport).meaning, named, expanded;
  for (size_t at = meaning.find("`%"); at != std::string::npos; at = meaning.find("`%", at + 1))
    if (at + 3 < meaning.size() && meaning[at + 3] == '`') named += meaning[at + 2];
  for (const ReportSequence& sequence : kReportSequences) expanded += sequence.letter;
  EXPECT_EQ(named, expanded) << meaning;
}

}  // namespace
}  // namespace fsdpskip
