// transformers' problem_type names (ft/base/problem_type.h).
#include "ft/base/problem_type.h"

namespace ft {

std::string problem_type_name(ProblemType type) {
  switch (type) {
    case ProblemType::kSingleLabel: return "single_label_classification";
    case ProblemType::kMultiLabel: return "multi_label_classification";
    case ProblemType::kRegression: return "regression";
  }
  return "single_label_classification";
}

std::optional<ProblemType> parse_problem_type(std::string_view name) {
  for (const ProblemType t : {ProblemType::kSingleLabel, ProblemType::kMultiLabel, ProblemType::kRegression})
    if (name == problem_type_name(t)) return t;
  return std::nullopt;
}

}  // namespace ft
