// `ft tokenize`: a model or checkpoint directory's tokenizer on stdin lines,
// ids out as JSON Lines, so ft's tokenization can be compared with
// AutoTokenizer's (scripts/check-hf.sh) or inspected by hand.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "ft/checkpoint/checkpoint.h"
#include "ft/base/error.h"
#include "ft/tasks/run_inputs.h"

namespace ft::app {
namespace {

int tokenize(const std::string& dir, int max_length) {
  const auto tok = load_model_dir_tokenizer(dir);
  if (!tok) fail("{}: neither tokenizer.json nor vocab.txt; give a model or checkpoint directory", dir);
  // As AutoTokenizer(text, truncation=True): the directory's model_max_length.
  if (max_length <= 0) max_length = static_cast<int>(read_model_max_length(dir).value_or(0));
  for (std::string line; std::getline(std::cin, line);) {
    const auto tab = line.find('\t');
    const std::string_view text(line);
    std::optional<std::string_view> pair;
    if (tab != std::string::npos) pair = text.substr(tab + 1);
    const Encoding enc = tok->encode(text.substr(0, tab), pair, max_length, false);
    std::cout << nlohmann::json{{"input_ids", enc.input_ids}, {"token_type_ids", enc.token_type_ids}}.dump() << "\n";
  }
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, int& exit_code) {
  struct TokenizeFlags {
    std::string dir;
    int max_length = 0;
  };
  auto tf = std::make_shared<TokenizeFlags>();
  auto* cmd = app.add_subcommand("tokenize", "token ids of stdin lines (a TAB separates a pair), JSON Lines");
  cmd->add_option("--checkpoint,--model", tf->dir, "model or checkpoint directory (tokenizer.json or vocab.txt)")
      ->required();
  cmd->add_option("--max-length", tf->max_length,
                  "truncate to this many tokens (default: the directory's model_max_length, else none)");
  cmd->callback([tf, &exit_code] { exit_code = tokenize(tf->dir, tf->max_length); });
}

}  // namespace ft::app
