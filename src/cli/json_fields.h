// Fields of JSON that other processes wrote (reports, the probes' lines, a
// Python's answer): a field missing or of another type reads as the
// fallback. nlohmann's value() would throw for another type, and an
// exception out of `fsdpskip report` is a crash (found by tools/fuzz).
#pragma once

#include <stdint.h>

#include <nlohmann/json.hpp>
#include <string>

namespace fsdpskip::cli {

inline const nlohmann::json* field(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto found = object.find(key);
  return found == object.end() ? nullptr : &*found;
}

inline std::string text_field(const nlohmann::json& object, const char* key, const std::string& fallback) {
  const nlohmann::json* value = field(object, key);
  return value && value->is_string() ? value->get<std::string>() : fallback;
}

inline int64_t integer_field(const nlohmann::json& object, const char* key, int64_t fallback) {
  const nlohmann::json* value = field(object, key);
  return value && value->is_number_integer() ? value->get<int64_t>() : fallback;
}

inline uint64_t count_field(const nlohmann::json& object, const char* key, uint64_t fallback) {
  const nlohmann::json* value = field(object, key);
  return value && value->is_number_unsigned() ? value->get<uint64_t>() : fallback;
}

inline bool flag_field(const nlohmann::json& object, const char* key, bool fallback) {
  const nlohmann::json* value = field(object, key);
  return value && value->is_boolean() ? value->get<bool>() : fallback;
}

// JSON text for output: bytes that are not UTF-8 (a path, a host name read
// from a report) become U+FFFD instead of an exception.
inline std::string json_text(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace fsdpskip::cli
