#include "onig_regex.h"

#include <memory>
#include <mutex>

#include <oniguruma.h>

#include "ft/base/error.h"

namespace ft::hf {
namespace {

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n = info ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<std::size_t>(n) : 0);
}

// onig_new is not safe to call from two threads at once (the crate takes a
// lock for it too); the library is initialised for UTF-8 on first use.
std::mutex& compile_mutex() {
  static std::mutex m;
  return m;
}

struct RegionFree {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

OnigRegex::OnigRegex(const std::string& pattern) {
  std::lock_guard<std::mutex> lock(compile_mutex());
  static const bool initialised = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    return onig_initialize(encodings, 1) == ONIG_NORMAL;
  }();
  if (!initialised) fail("cannot initialise the Oniguruma regular expression library");
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  OnigErrorInfo info{};
  regex_t* compiled = nullptr;
  const int rc = onig_new(&compiled, begin, begin + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                          ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) fail("{}", onig_message(rc, &info));
  regex_ = compiled;
}

OnigRegex::~OnigRegex() {
  if (regex_) onig_free(static_cast<regex_t*>(regex_));
}

std::vector<std::pair<std::size_t, std::size_t>> OnigRegex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::unique_ptr<OnigRegion, RegionFree> region(onig_region_new());
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  std::size_t from = 0;
  bool after_match = false;  // the last match taken was not empty
  while (from <= text.size()) {
    onig_region_clear(region.get());
    const int at = onig_search(static_cast<regex_t*>(regex_), begin, end, begin + from, end, region.get(),
                               ONIG_OPTION_NONE);
    if (at == ONIG_MISMATCH) break;
    if (at < 0) fail("regular expression search failed: {}", onig_message(at, nullptr));
    const auto s = static_cast<std::size_t>(region->beg[0]);
    const auto e = static_cast<std::size_t>(region->end[0]);
    from = e;
    if (s == e) {
      // Step over one whole character, as the crate does, so the next search
      // never starts inside a UTF-8 sequence.
      std::size_t step = 1;
      while (from + step < text.size() && (static_cast<unsigned char>(text[from + step]) & 0xC0u) == 0x80u) ++step;
      from += step;
      if (after_match) {
        after_match = false;
        continue;
      }
    } else {
      after_match = true;
    }
    out.emplace_back(s, e);
  }
  return out;
}

}  // namespace ft::hf
