// The CPython layouts of src/torch/python_layouts.h against the headers of
// the suite's Python (tests/fixtures/python_layout.c prints offsetof on them):
// Debian 12 checks 3.11's row, trixie 3.13's, sid 3.14's. The frames read
// with them are checked on real programs by
// tests/integration/test_python_frames.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../../src/torch/python_layouts.h"

namespace fsdpskip {
namespace {

std::map<std::string, size_t> printed_by(const char* program) {
  std::map<std::string, size_t> values;
  FILE* output = popen(program, "r");
  if (output == nullptr) return values;
  char name[64];
  size_t value;
  while (fscanf(output, "%63s %zu", name, &value) == 2) values[name] = value;
  pclose(output);
  return values;
}

TEST(PythonLayoutEveryCpython, TheRowOfTheSuitesPythonMatchesItsHeaders) {
  std::map<std::string, size_t> header = printed_by(FSDPSKIP_PYTHON_LAYOUT);
  ASSERT_TRUE(header.count("minor")) << FSDPSKIP_PYTHON_LAYOUT << " printed nothing";
  int minor = static_cast<int>(header["minor"]);
  EXPECT_EQ(header["object_type"], kObjectType);
  EXPECT_EQ(header["object_size"], kObjectSize);
  EXPECT_EQ(header["first_hidden_owner"], static_cast<size_t>(kFirstHiddenFrameOwner));
  if (header.count("stackref_tag_bits")) EXPECT_EQ(header["stackref_tag_bits"] & ~kStackRefTagBits, 0u);

  // Each field the headers printed, and what the row for this version says of it.
  std::vector<std::pair<const char*, size_t>> expected;
  if (minor <= 12) {
    const PythonLayout* row = nullptr;
    for (const PythonLayout& layout : kFixedPythonLayouts)
      if (layout.minor == minor) row = &layout;
    ASSERT_NE(row, nullptr) << "no row for 3." << minor;
    expected = {{"thread_frame", row->thread_frame}, {"cframe_frame", static_cast<size_t>(row->cframe_frame)},
                {"frame_previous", row->frame_previous}, {"frame_code", row->frame_code},
                {"frame_instruction", row->frame_instruction}, {"frame_owner", row->frame_owner},
                {"code_filename", row->code_filename}, {"code_name", row->code_name},
                {"code_firstlineno", row->code_firstlineno}, {"code_bytecode", row->code_bytecode},
                {"unicode_length", row->unicode_length}, {"unicode_state", row->unicode_state},
                {"ascii_size", row->ascii_size}, {"compact_size", row->compact_size}};
  } else {
    const DebugOffsetsPositions* row = nullptr;
    for (const DebugOffsetsPositions& positions : kDebugOffsetsPositions)
      if (positions.minor == minor) row = &positions;
    ASSERT_NE(row, nullptr) << "no row for 3." << minor;
    expected = {{"version_position", kDebugOffsetsVersion}, {"free_threaded_position", kDebugOffsetsFreeThreaded},
                {"compact_extra", 16}, {"thread_current_frame", row->thread_current_frame},
                {"frame_previous", row->frame_previous}, {"frame_executable", row->frame_executable},
                {"frame_instruction", row->frame_instruction}, {"frame_owner", row->frame_owner},
                {"code_filename", row->code_filename}, {"code_name", row->code_name},
                {"code_firstlineno", row->code_firstlineno}, {"code_bytecode", row->code_bytecode},
                {"unicode_state", row->unicode_state}, {"unicode_length", row->unicode_length},
                {"unicode_ascii_size", row->unicode_ascii_size}, {"object_type_position", row->object_type}};
  }
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(header.count(name)) << name << " was not printed";
    EXPECT_EQ(header[name], value) << name << " of 3." << minor;
  }
}

}  // namespace
}  // namespace fsdpskip
