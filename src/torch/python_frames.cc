#include "python_frames.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "python_layouts.h"

namespace fsdpskip {
namespace {

constexpr int kMostFramesWalked = 256;  // a deeper chain is cut, never followed forever
constexpr long kMostCharacters = 512;   // of a file or function name

// What find_python found; read-only once set (before any capture).
struct Python {
  bool usable = false;
  PythonLayout layout = {};
  const void* code_type = nullptr;
  const void* unicode_type = nullptr;
  void* (*this_thread_state)() = nullptr;
  int (*addr_to_line)(const void* code, int byte_offset) = nullptr;
  int (*initialized)() = nullptr;
  int (*finalizing)() = nullptr;
  void (*say)(fsdpskip_message kind, const char* text) = nullptr;
  char name[64] = "";  // "CPython 3.11.2"
} g_python;

// Whether the layout has been seen to hold on a real frame chain.
enum class Checked { kNotYet, kHolds, kFails };
std::atomic<Checked> g_checked{Checked::kNotYet};

template <typename T>
T at(const void* base, size_t offset) {
  T value;
  memcpy(&value, static_cast<const char*>(base) + offset, sizeof value);
  return value;
}

const void* pointer_at(const void* base, size_t offset) { return at<const void*>(base, offset); }

bool is_a(const void* object, const void* type) {
  return object != nullptr && type != nullptr && pointer_at(object, kObjectType) == type;
}

// True when the 8 bytes at `address` can be read, without touching them:
// rt_sigprocmask copies its new mask in before it rejects an invalid `how`.
bool readable(const void* address) {
  int saved = errno;
  // EINVAL only: a seccomp filter's ENOSYS or EPERM proves nothing.
  bool result = syscall(SYS_rt_sigprocmask, ~0, address, nullptr, 8) == -1 && errno == EINVAL;
  errno = saved;
  return result;
}

bool readable(const void* base, size_t offset) { return readable(static_cast<const char*>(base) + offset); }

void append_utf8(std::string* out, uint32_t c) {
  // A lone surrogate (a surrogateescape'd file name) or no character at all.
  if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD;
  if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xC0 | c >> 6), *out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xE0 | c >> 12), *out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | c >> 18), *out += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    *out += static_cast<char>(0x80 | (c >> 6 & 0x3F)), *out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Where a str keeps its characters: its compact representation (every str
// a code object holds is compact).
struct StrData {
  unsigned kind;  // bytes a character: 1, 2 or 4
  bool ascii;
  long length;    // characters, at most kMostCharacters
  const char* data;
};

bool str_data(const void* object, StrData* str) {
  const PythonLayout& layout = g_python.layout;
  if (!is_a(object, g_python.unicode_type)) return false;
  uint32_t state = at<uint32_t>(object, layout.unicode_state);
  // interned:2, kind:3, compact:1, ascii:1 (the same bits in 3.11 to 3.14)
  str->kind = state >> 2 & 7;
  str->ascii = state >> 6 & 1;
  str->length = at<long>(object, layout.unicode_length);
  if (!(state >> 5 & 1) || str->length < 0 || (str->kind != 1 && str->kind != 2 && str->kind != 4)) return false;
  if (str->length > kMostCharacters) str->length = kMostCharacters;
  str->data = static_cast<const char*>(object) + (str->ascii ? layout.ascii_size : layout.compact_size);
  return true;
}

// A str's text as UTF-8; "?" for anything but a compact str.
std::string text_of(const void* object) {
  StrData str;
  if (!str_data(object, &str)) return "?";
  if (str.ascii) return std::string(str.data, str.length);
  std::string out;
  for (long i = 0; i < str.length; ++i)
    append_utf8(&out, str.kind == 1 ? static_cast<unsigned char>(str.data[i])
                      : str.kind == 2 ? at<uint16_t>(str.data, 2 * i)
                                      : at<uint32_t>(str.data, 4 * i));
  return out;
}

// The byte offset of the instruction a frame is at (3.13+: being run; 3.11,
// 3.12: the last one begun) in its code; -1 when it is before the first or
// past the code's end (a frame being set up).
long instruction_offset(const void* frame, const void* code) {
  const PythonLayout& layout = g_python.layout;
  long offset = static_cast<const char*>(pointer_at(frame, layout.frame_instruction)) -
                (static_cast<const char*>(code) + layout.code_bytecode);
  long bytes = 2 * at<long>(code, kObjectSize);  // ob_size: 2-byte code units
  return offset >= 0 && offset < bytes ? offset : -1;
}

// Reads the calling thread's frame chain once with every read checked first,
// so that a layout that does not hold (a build fsdpskip misjudged) turns the
// Python frames off instead of crashing the program; the walks after it read
// directly. kNotYet while this thread has no frames to check with.
Checked check_layout_on_this_thread() {
  const Python& python = g_python;
  const PythonLayout& layout = python.layout;
  const void* thread = python.this_thread_state();
  if (thread == nullptr) return Checked::kNotYet;
  if (!readable(thread, layout.thread_frame)) return Checked::kFails;
  const void* frame = pointer_at(thread, layout.thread_frame);
  if (layout.cframe_frame >= 0 && frame != nullptr) {
    if (!readable(frame, layout.cframe_frame)) return Checked::kFails;
    frame = pointer_at(frame, layout.cframe_frame);
  }
  int code_frames = 0;
  for (int walked = 0; frame != nullptr && walked < kMostFramesWalked; ++walked) {
    for (size_t offset : {layout.frame_code, layout.frame_previous, layout.frame_instruction, layout.frame_owner})
      if (!readable(frame, offset)) return Checked::kFails;
    const void* code = reinterpret_cast<const void*>(at<uintptr_t>(frame, layout.frame_code) & ~kStackRefTagBits);
    if (at<unsigned char>(frame, layout.frame_owner) < kFirstHiddenFrameOwner) {
      if (code == nullptr || !readable(code, kObjectType) || !is_a(code, python.code_type)) return Checked::kFails;
      for (size_t offset : {layout.code_filename, layout.code_name, layout.code_firstlineno, kObjectSize})
        if (!readable(code, offset)) return Checked::kFails;
      for (size_t offset : {layout.code_filename, layout.code_name}) {
        const void* name = pointer_at(code, offset);
        StrData str;
        if (name == nullptr || !readable(name, kObjectType) || !readable(name, layout.unicode_state) ||
            !readable(name, layout.unicode_length) || !str_data(name, &str) ||
            !readable(str.data + (str.length * str.kind >= 8 ? str.length * str.kind - 8 : 0)))
          return Checked::kFails;
      }
      ++code_frames;
    }
    frame = pointer_at(frame, layout.frame_previous);
  }
  // The chain must end (a null previous frame) and hold code: a wrong offset
  // that happens to read null at once proves nothing.
  if (frame != nullptr) return Checked::kFails;
  return code_frames > 0 ? Checked::kHolds : Checked::kNotYet;
}

const PythonLayout* fixed_layout(int minor) {
  for (const PythonLayout& layout : kFixedPythonLayouts)
    if (layout.minor == minor) return &layout;
  return nullptr;
}

// 3.13+: the layout from _PyRuntime's debug offsets; false (with `why`) when
// they are not what this version's row expects.
bool layout_from_debug_offsets(int minor, unsigned long version, PythonLayout* layout, const char** why) {
  const DebugOffsetsPositions* positions = nullptr;
  for (const DebugOffsetsPositions& row : kDebugOffsetsPositions)
    if (row.minor == minor) positions = &row;
  const void* runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
  if (positions == nullptr) return *why = "a CPython version fsdpskip does not know", false;
  if (runtime == nullptr || memcmp(runtime, kDebugOffsetsCookie, sizeof kDebugOffsetsCookie) != 0)
    return *why = "no debug offsets in _PyRuntime", false;
  if ((at<uint64_t>(runtime, kDebugOffsetsVersion) >> 16) != (version >> 16))
    return *why = "debug offsets of another version", false;
  if (at<uint64_t>(runtime, kDebugOffsetsFreeThreaded) != 0)
    return *why = "a free-threaded build (not supported)", false;
  auto offset = [runtime](size_t position) { return static_cast<size_t>(at<uint64_t>(runtime, position)); };
  *layout = PythonLayout{minor,
                         offset(positions->thread_current_frame),
                         -1,
                         offset(positions->frame_previous),
                         offset(positions->frame_executable),
                         offset(positions->frame_instruction),
                         offset(positions->frame_owner),
                         offset(positions->code_filename),
                         offset(positions->code_name),
                         offset(positions->code_firstlineno),
                         offset(positions->code_bytecode),
                         offset(positions->unicode_length),
                         offset(positions->unicode_state),
                         offset(positions->unicode_ascii_size),
                         offset(positions->unicode_ascii_size) + 16};
  // Offsets into objects of a few hundred bytes: anything larger is not a layout.
  for (size_t value : {layout->thread_frame, layout->frame_previous, layout->frame_code, layout->frame_instruction,
                       layout->frame_owner, layout->code_filename, layout->code_name, layout->code_firstlineno,
                       layout->code_bytecode, layout->unicode_length, layout->unicode_state, layout->ascii_size})
    if (value >= 4096) return *why = "implausible debug offsets", false;
  // A field whose value is known: a layout of _Py_DebugOffsets that moved
  // within the minor version (a patch release) shows here.
  if (offset(positions->object_type) != kObjectType) return *why = "debug offsets laid out otherwise", false;
  return true;
}

}  // namespace

std::string find_python(void (*say)(fsdpskip_message kind, const char* text)) {
  // Every CPython torch supports has one of these (3.13 renamed it).
  for (const char* name : {"Py_IsFinalizing", "_Py_IsFinalizing"})
    if (void* function = dlsym(RTLD_DEFAULT, name)) {
      g_python.finalizing = reinterpret_cast<int (*)()>(function);
      break;
    }
  const auto* version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
  if (version == nullptr) return "no CPython 3.11 or later in this process";
  int major = static_cast<int>(*version >> 24), minor = static_cast<int>(*version >> 16 & 0xFF);
  Python python;
  python.say = say;
  char* name = python.name;
  snprintf(name, sizeof python.name, "CPython %d.%d.%d", major, minor, static_cast<int>(*version >> 8 & 0xFF));
  const char* why = nullptr;
  PythonLayout layout = {};
  if (major != 3 || minor < 11) why = "a CPython version fsdpskip does not know";
  else if (const PythonLayout* fixed = fixed_layout(minor)) layout = *fixed;
  else layout_from_debug_offsets(minor, *version, &layout, &why);
  python.code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
  python.unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  python.this_thread_state = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
  python.addr_to_line = reinterpret_cast<int (*)(const void*, int)>(dlsym(RTLD_DEFAULT, "PyCode_Addr2Line"));
  python.initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  python.finalizing = g_python.finalizing;
  if (why == nullptr && !(python.code_type && python.unicode_type && python.this_thread_state &&
                          python.addr_to_line && python.initialized && python.finalizing))
    why = "some of its functions are not exported";
  if (why != nullptr) return std::string(name) + ": no Python frames (" + why + ")";
  python.layout = layout;
  python.usable = true;
  g_python = python;
  return name;
}

bool python_finalizing() { return g_python.finalizing != nullptr && g_python.finalizing(); }

void append_python_frames(std::vector<PythonFrame>* frames, int most) {
  const Python& python = g_python;
  // Finalization frees the other threads' states: a daemon thread skipping
  // while the main thread finalizes must not walk its own. (A finalization
  // that begins during the few microseconds of a walk is not guarded.)
  if (!python.usable || !python.initialized() || python_finalizing()) return;
  Checked state = g_checked.load(std::memory_order_acquire);
  if (state == Checked::kFails) return;
  if (state == Checked::kNotYet) {
    Checked checked = check_layout_on_this_thread();
    if (checked == Checked::kNotYet) return;
    Checked expected = Checked::kNotYet;
    if (g_checked.compare_exchange_strong(expected, checked) && checked == Checked::kFails && python.say) {
      std::string text = std::string("Python frames: ") + python.name +
                         "'s frames are not laid out as fsdpskip expects; pending storages are named by their "
                         "native frames only";
      python.say(FSDPSKIP_MESSAGE_WARNING, text.c_str());
    }
    // This thread's own verdict, whatever another thread found meanwhile.
    if (checked != Checked::kHolds) return;
  }
  const void* thread = python.this_thread_state();
  if (thread == nullptr) return;  // a thread Python never saw (torch's own, a LibTorch program's)
  const PythonLayout& layout = python.layout;
  const void* frame = pointer_at(thread, layout.thread_frame);
  if (layout.cframe_frame >= 0 && frame != nullptr) frame = pointer_at(frame, layout.cframe_frame);
  int added = 0;
  for (int walked = 0; frame != nullptr && added < most && walked < kMostFramesWalked; ++walked) {
    const void* code = reinterpret_cast<const void*>(at<uintptr_t>(frame, layout.frame_code) & ~kStackRefTagBits);
    if (at<unsigned char>(frame, layout.frame_owner) < kFirstHiddenFrameOwner && is_a(code, python.code_type)) {
      PythonFrame entry;
      entry.file = text_of(pointer_at(code, layout.code_filename));
      entry.function = text_of(pointer_at(code, layout.code_name));
      // Outside the code (a frame being set up): the def's line.
      long offset = instruction_offset(frame, code);
      entry.line = offset >= 0 ? python.addr_to_line(code, static_cast<int>(offset))
                               : at<int>(code, layout.code_firstlineno);
      frames->push_back(std::move(entry));
      ++added;
    }
    frame = pointer_at(frame, layout.frame_previous);
  }
}

}  // namespace fsdpskip
