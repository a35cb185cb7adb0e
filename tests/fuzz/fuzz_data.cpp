// Fuzz target: the text data readers (ft/data/data.h parse_text_data) — JSON
// list, JSON Lines, CSV, TSV — and the train/dev split of what they accept.
//
// Byte 0 picks the format and the DataSource options; the rest is the file.
#include <string>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "fuzz_util.h"

namespace {

int one_input(const uint8_t* data, size_t size) {
  using ft_fuzz::check;
  if (size < 1) return 0;
  // bits 0-1 format, bit 2 skip bad rows, bit 3 pair field, bit 4 fixed
  // label names, bit 5 max_rows 3, bit 6 random take, bit 7 strip spaces.
  const uint8_t flags = data[0];
  constexpr ft::DataFormat kFormats[] = {ft::DataFormat::JsonList, ft::DataFormat::JsonLines,
                                         ft::DataFormat::Csv, ft::DataFormat::Tsv};
  ft::DataSource src;
  src.path = "fuzz." + ft::to_string(kFormats[flags & 3]);
  src.format = kFormats[flags & 3];
  src.bad_rows = (flags & 4) ? ft::BadRows::Skip : ft::BadRows::Error;
  if (flags & 8) src.pair_field = "pair";
  if (flags & 16) src.label_names = {"neg", "pos", "7"};
  if (flags & 32) src.max_rows = 3;
  src.take = (flags & 64) ? ft::Take::Random : ft::Take::First;
  src.take_seed = 5;
  src.strip_spaces = flags & 128;

  ft::TextData text;
  try {
    text = ft::parse_text_data(ft_fuzz::as_view(data + 1, size - 1), src);
  } catch (const ft::Error& e) {
    ft_fuzz::rejected(e);
    return 0;
  }
  const auto labels = static_cast<int64_t>(text.label_names.size());
  check(!text.rows.empty(), "accepted data has no rows");
  check(labels > 0, "accepted data has no labels");
  check(src.max_rows == 0 || static_cast<int64_t>(text.rows.size()) <= src.max_rows,
        "more rows than max_rows");
  check(text.skipped >= static_cast<int64_t>(text.skip_notes.size()), "more skip notes than skipped rows");
  check(src.bad_rows == ft::BadRows::Skip || text.skipped == 0, "rows skipped under bad_rows: error");
  for (const auto& row : text.rows) {
    check(row.label >= 0 && row.label < labels, "label id outside [0, num_labels)");
    if (src.pair_field.empty()) check(row.pair.empty() || src.format == ft::DataFormat::JsonList,
                                      "pair text without a pair field");
    if (src.strip_spaces) check(row.text.find(' ') == std::string::npos, "strip_spaces left a space");
  }
  const size_t n = text.rows.size();
  try {
    auto [train, dev] = ft::split_train_dev(std::move(text), 0.25, 11);
    check(train.rows.size() + dev.rows.size() == n, "split lost or invented rows");
    check(static_cast<int64_t>(train.label_names.size()) == labels, "split changed the label set");
  } catch (const ft::Error& e) {
    ft_fuzz::bug(std::string("split_train_dev rejects accepted data: ") + e.what());
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ft_fuzz::run_input(ft_fuzz::kSmallStack, [&] { one_input(data, size); });
  return 0;
}
