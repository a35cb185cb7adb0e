// The seeded train/dev split.
#include <cmath>
#include <utility>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/data/sampler.h"

namespace ft {

std::pair<TextData, TextData> split_train_dev(TextData all, double dev_fraction, uint64_t seed,
                                              bool shuffle) {
  if (!(dev_fraction >= 0.0 && dev_fraction < 1.0))
    fail("{}: dev_fraction is {}; it must be in [0, 1)", all.source, dev_fraction);
  const auto n = static_cast<int64_t>(all.rows.size());
  const auto n_dev = static_cast<int64_t>(std::llround(static_cast<double>(n) * dev_fraction));
  std::vector<int64_t> order;
  if (shuffle) {
    order = seeded_permutation(n, seed);
  } else {
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  TextData train, dev;
  for (TextData* part : {&train, &dev}) {
    part->label_names = all.label_names;
    part->skipped = all.skipped;
    part->skip_notes = all.skip_notes;
    part->source = all.source;
  }
  train.rows.reserve(static_cast<size_t>(n - n_dev));
  dev.rows.reserve(static_cast<size_t>(n_dev));
  for (int64_t i = 0; i < n; ++i) {
    TextData& part = i < n - n_dev ? train : dev;
    part.rows.push_back(std::move(all.rows[static_cast<size_t>(order[static_cast<size_t>(i)])]));
  }
  return {std::move(train), std::move(dev)};
}

}  // namespace ft
