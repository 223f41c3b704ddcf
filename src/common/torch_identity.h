// The identity a plugin records of the libtorch it was built for: lines
// "key=value" (build-id, torch, libtorch, abi: the plugin ABI) in the ELF section
// FSDPSKIP_TORCH_ID_SECTION, written by src/torch/CMakeLists.txt and read by
// the preload (before dlopen) and by the doctor. Header-only and
// freestanding, with hex_text for build-ids read by either side.
#pragma once

#include <stddef.h>
#include <stdio.h>
#include <string.h>

namespace fsdpskip {

// Copies the value of "key=" on its own line of `identity` into `out`;
// "?" when absent. Returns out.
inline const char* identity_field(const char* identity, const char* key, char* out, size_t out_size) {
  size_t key_length = strlen(key);
  for (const char* line = identity; line != nullptr && *line != '\0';) {
    const char* end = strchr(line, '\n');
    if (strncmp(line, key, key_length) == 0 && line[key_length] == '=') {
      const char* value = line + key_length + 1;
      snprintf(out, out_size, "%.*s", static_cast<int>(end ? end - value : strlen(value)), value);
      return out;
    }
    line = end ? end + 1 : nullptr;
  }
  snprintf(out, out_size, "?");
  return out;
}

// `count` bytes as lower-case hex in `out` (NUL-terminated, cut at whole bytes).
inline void hex_text(const unsigned char* bytes, size_t count, char* out, size_t out_size) {
  static const char kDigits[] = "0123456789abcdef";
  size_t i = 0;
  for (; i < count && 2 * i + 2 < out_size; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  if (out_size) out[2 * i] = '\0';
}

}  // namespace fsdpskip
