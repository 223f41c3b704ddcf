// Storages whose pages fsdpskip owns, and the guard on a skipped one.
//
// A skipped init is deferred, not dropped: a skipped storage's values exist
// as its recipe (replay.h) until either another rank's data overwrites all
// of it, or anything else touches it, and then it is materialized first
// (its recipe replayed into it), so that the access sees what it would have
// seen without fsdpskip. Noticing "anything else" must not rest on a list
// of readers, so a skipped storage's pages are protected (PROT_NONE): any
// read or write of them, by any kernel, numpy, a Python buffer or a custom
// op, faults, and the preload's fault handler has it materialized before
// the access is retried (src/preload/page_faults.cc). A system call that
// would get EFAULT instead is caught before it is made (the same file).
//
// Only whole pages can be protected, and the CPU allocator's memory shares
// its first and last pages with other allocations. So while a loading phase
// lasts, the plugin installs this allocator as the CPU allocator: a request
// of at least owned_bytes() (a page) gets a private anonymous mapping of whole pages
// of its own; smaller ones, and every request outside loading, go to the
// allocator it replaced. Only storages of such mappings are ever skipped;
// every other init runs (a small storage's init costs less than the system
// calls its guard would).
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_set>

namespace fsdpskip {

class OwnedPages final : public c10::Allocator {
 public:
  static OwnedPages& instance();  // immortal: its storages outlive every phase

  // The least request given pages of its own: one page. A smaller one
  // would waste most of its page, and its init costs less than a guard's
  // system calls.
  static size_t owned_bytes();

  // Makes this the CPU allocator (a loading phase begins), or gives the
  // place back to the one it replaced (it ends).
  void install();
  void uninstall();

  // The allocator's entry points. torch 1.13 declares allocate const, 2.3
  // and later not, and adds copy_data: whichever this torch declares is
  // the one that overrides.
  c10::DataPtr allocate(size_t bytes) const;
  c10::DataPtr allocate(size_t bytes) { return static_cast<const OwnedPages*>(this)->allocate(bytes); }
  void copy_data(void* destination, const void* source, std::size_t bytes) const;

  // Gives a parameter's storage that was allocated while this allocator
  // was not installed (the plugin loads at a process's first parameter,
  // after its storage was made) pages of its own, its bytes copied over.
  // Returns its old memory, which the caller keeps until the storage ends,
  // so that a raw pointer taken before (numpy's) never points at freed
  // memory (it sees the old bytes: docs/limits.md); empty when it did nothing.
  c10::DataPtr adopt(c10::StorageImpl* storage);

  // True when a DataPtr (its deleter) is one of this allocator's mappings.
  static bool owns(c10::DeleterFnPtr deleter) { return deleter == &release; }

  // Protects a mapping's pages, released first (they are never needed
  // again: a materialization writes every byte). `context` is the DataPtr's.
  // False when the kernel refused (the map count): nothing is protected.
  bool guard(void* context);
  // Makes a guarded mapping's pages accessible again (they read as zeros
  // until written). Nothing when it is not guarded, or no longer exists.
  void unguard(void* context);
  // Whether `context` is a mapping that exists and is guarded now.
  bool guarded(void* context);
  // Replaces a guarded mapping's pages, in one step, with `pages` (a
  // mapping of the same length from scratch_pages(), which is gone after),
  // and unguards it: a thread that touches it meanwhile either faults and
  // waits, or sees every value. False when it is not guarded (any more) or
  // the kernel refused: then nothing changed.
  bool replace_guarded(void* context, void* pages);
  // Fresh readable and writable pages as long as the mapping, for
  // replace_guarded; nullptr when the kernel refused.
  void* scratch_pages(void* context);
  static size_t length_of(void* context);
  // The mapping of this allocator's that holds `address`, or nullptr; with
  // `guarded` set when it is guarded. Safe in the preload's fault handler:
  // its lock is never held while guarded memory is touched.
  void* mapping_at(const void* address, bool* guarded);
  // The context of a guarded mapping that [address, address + bytes)
  // overlaps, or nullptr (a range over several: one at a time).
  void* guarded_in(const void* address, size_t bytes);
  // How many mappings are guarded now: the preload's system-call checks
  // look no further while it is 0.
  size_t guarded_count() const { return guarded_count_.load(std::memory_order_relaxed); }
  // The mappings that exist now, and how many are guarded (the mechanism's
  // own cost, against vm.max_map_count).
  size_t mappings() const { return mappings_.load(std::memory_order_relaxed); }
  // Its lock, for the tracker's fork handlers.
  std::mutex& mutex() { return mutex_; }

 private:
  struct Mapping;
  static void release(void* context);
  void set_guarded_locked(Mapping* mapping, bool guarded);

  std::atomic<c10::Allocator*> replaced_{nullptr};  // the CPU allocator before this one
  std::atomic<bool> installed_{false};
  std::mutex mutex_;
  std::map<uintptr_t, Mapping*> by_address_;  // every mapping, by its first byte
  // Every mapping, asked before a context is dereferenced: one handed out
  // before its storage was freed may be stale.
  std::unordered_set<const Mapping*> live_;
  bool live_locked(Mapping* mapping) const { return live_.count(mapping) != 0; }
  std::atomic<size_t> guarded_count_{0};
  std::atomic<size_t> mappings_{0};
};

}  // namespace fsdpskip
