// Classification metrics against hand-computed confusion matrices and
// sklearn's documented values.
#include "ft/base/error.h"
#include "ft/observe/metrics.h"
#include "ft_test.h"

TEST_CASE("sklearn's f1_score doc example: macro 0.2667, accuracy 1/3") {
  // sklearn: f1_score([0,1,2,0,1,2], [0,2,1,0,0,1], average='macro') == 0.26666...
  const std::vector<int64_t> y_true{0, 1, 2, 0, 1, 2};
  const std::vector<int64_t> y_pred{0, 2, 1, 0, 0, 1};
  const auto r = ft::classification_report(y_pred, y_true, 3, 0.75);
  CHECK(r.confusion == std::vector<std::vector<int64_t>>{{2, 0, 0}, {1, 0, 1}, {0, 2, 0}});
  CHECK(r.accuracy == doctest::Approx(1.0 / 3).epsilon(1e-12));
  CHECK(r.f1[0] == doctest::Approx(0.8).epsilon(1e-12));
  CHECK(r.f1[1] == 0.0);
  CHECK(r.f1[2] == 0.0);
  CHECK(r.precision[0] == doctest::Approx(2.0 / 3).epsilon(1e-12));
  CHECK(r.recall[0] == 1.0);
  CHECK(r.macro_f1 == doctest::Approx(0.8 / 3).epsilon(1e-12));
  CHECK(r.support == std::vector<int64_t>{2, 2, 2});
  CHECK(r.total == 6);
  CHECK(r.loss == 0.75);
  // A fourth class that never occurs is left out of the macro average (as
  // sklearn without labels=): still 0.8 / 3, not 0.8 / 4.
  const auto r4 = ft::classification_report(y_pred, y_true, 4, 0.75);
  CHECK(r4.macro_f1 == doctest::Approx(0.8 / 3).epsilon(1e-12));
  CHECK(r4.f1.size() == 4u);
  CHECK(r4.support[3] == 0);
}

TEST_CASE("a class predicted but never true counts with F1 0") {
  // true 0 0 1 1, predicted 0 2 1 1 (3 classes):
  // class 0: tp 1, predicted 1, support 2 -> P 1, R 1/2, F1 2/3
  // class 1: tp 2, predicted 2, support 2 -> F1 1
  // class 2: tp 0, predicted 1, support 0 -> P 0, R 0, F1 0 (present: averaged)
  const auto r = ft::classification_report({0, 2, 1, 1}, {0, 0, 1, 1}, 3, 0.0);
  CHECK(r.accuracy == 0.75);
  CHECK(r.f1[0] == doctest::Approx(2.0 / 3).epsilon(1e-12));
  CHECK(r.f1[1] == 1.0);
  CHECK(r.f1[2] == 0.0);
  CHECK(r.macro_f1 == doctest::Approx(5.0 / 9).epsilon(1e-12));
  CHECK(r.macro_precision == doctest::Approx(2.0 / 3).epsilon(1e-12));
  CHECK(r.macro_recall == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(r.weighted_f1 == doctest::Approx((2.0 / 3 * 2 + 2) / 4).epsilon(1e-12));
}

TEST_CASE("report_from_confusion: summed per-rank matrices give the global report") {
  // Two ranks' halves of the same evaluation.
  auto a = ft::confusion_matrix({0, 2, 1}, {0, 1, 2}, 3);
  auto b = ft::confusion_matrix({0, 0, 1}, {0, 1, 2}, 3);
  for (size_t t = 0; t < 3; ++t)
    for (size_t p = 0; p < 3; ++p) a[t][p] += b[t][p];
  const auto merged = ft::report_from_confusion(a, 1.5);
  const auto whole = ft::classification_report({0, 2, 1, 0, 0, 1}, {0, 1, 2, 0, 1, 2}, 3, 1.5);
  CHECK(merged.confusion == whole.confusion);
  CHECK(merged.macro_f1 == whole.macro_f1);
  CHECK(merged.accuracy == whole.accuracy);
  // Empty evaluation: zeros, not NaN.
  const auto empty = ft::classification_report({}, {}, 2, 0.0);
  CHECK(empty.accuracy == 0.0);
  CHECK(empty.macro_f1 == 0.0);
  CHECK(empty.total == 0);
}

TEST_CASE("metrics reject mismatched or out-of-range input") {
  CHECK_THROWS_WITH_AS(ft::classification_report({0, 1}, {0}, 2, 0.0),
                       doctest::Contains("2 predictions but 1 labels"), ft::Error);
  CHECK_THROWS_WITH_AS(ft::classification_report({0, 2}, {0, 1}, 2, 0.0),
                       doctest::Contains("prediction 2 at position 1"), ft::Error);
  CHECK_THROWS_WITH_AS(ft::classification_report({0, 1}, {-1, 1}, 2, 0.0),
                       doctest::Contains("label -1 at position 0"), ft::Error);
  CHECK_THROWS_AS(ft::report_from_confusion({{1, 0}, {0}}, 0.0), ft::Error);
  CHECK(ft::class_counts({0, 2, 2, 1, 2}, 4) == std::vector<int64_t>{1, 1, 3, 0});
  CHECK_THROWS_AS(ft::class_counts({0, 4}, 4), ft::Error);
}

TEST_CASE("format_report: sklearn-shaped table, aligned by display width") {
  const auto r = ft::classification_report({0, 2, 1, 0, 0, 1}, {0, 1, 2, 0, 1, 2}, 3, 0.5);
  const std::string expected =
      "              precision    recall  f1-score   support\n"
      "\n"
      "           0       0.67      1.00      0.80         2\n"
      "           1       0.00      0.00      0.00         2\n"
      "           2       0.00      0.00      0.00         2\n"
      "\n"
      "    accuracy                           0.33         6\n"
      "   macro avg       0.22      0.33      0.27         6\n"
      "weighted avg       0.22      0.33      0.27         6\n"
      "        loss                           0.50\n";
  CHECK(ft::format_report(r, {}, 2) == expected);
  // CJK names take two columns each: "悲伤" is 6 bytes but 4 columns wide.
  const std::string cjk = ft::format_report(r, {"其他", "喜好", "悲伤"}, 2);
  CHECK(cjk.find("\n        悲伤       0.00") != std::string::npos);
  CHECK_THROWS_WITH_AS(ft::format_report(r, {"a", "b"}, 2),
                       doctest::Contains("2 label names for 3 classes"), ft::Error);
}
