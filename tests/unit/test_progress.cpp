// The terminal progress bar's text: rate, elapsed time and ETA once known;
// the evaluation's own line. (Drawing needs a terminal; the text does not.)
#include "ft/observe/events.h"

#include <cmath>

#include <doctest/doctest.h>

TEST_CASE("progress line: bar, step, loss, rate, elapsed and ETA") {
  ft::ProgressLine p{37, 200, 0.71734, 45.26, 41.2, 180.6};
  CHECK(ft::format_progress(p) ==
        "[#####.........................] 37/200 loss 0.7173 | 45.3 samples/s | 0:41 elapsed, ETA 3:01");
  // The first redraw knows no loss (none logged yet), rate or ETA: left out.
  ft::ProgressLine first{1, 200, std::nan(""), 0.0, 0.0, -1.0};
  CHECK(ft::format_progress(first) == "[..............................] 1/200 | 0:00 elapsed");
  ft::ProgressLine done{200, 200, 0.1, 50.0, 3725.0, 0.0};
  CHECK(ft::format_progress(done) ==
        "[##############################] 200/200 loss 0.1000 | 50.0 samples/s | 1:02:05 elapsed, ETA 0:00");
}

TEST_CASE("durations and the evaluation line") {
  CHECK(ft::format_duration(0.4) == "0:00");
  CHECK(ft::format_duration(59.6) == "1:00");
  CHECK(ft::format_duration(3599) == "59:59");
  CHECK(ft::format_duration(3600) == "1:00:00");
  CHECK(ft::format_duration(-3) == "0:00");
  CHECK(ft::format_eval_progress(12, 40) == "[eval] 12/40 batches");
}
